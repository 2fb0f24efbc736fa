//! Ordinary programs: languages, statuses, limits.

use std::time::{Duration, Instant};

use temper_protocol::{Compare, Language, Limits, RunRequest, RunStatus, TestCase, TestsRequest};
use temper_verify::code::{CodeRunner, call_harness};

use crate::support::{assert_clean, req, run, sandbox};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn languages_and_statuses() {
    let sb = sandbox().await;
    assert!(sb.is_sandboxed());
    let mut r = req(Language::Python, "import sys\nprint(sys.stdin.read()[::-1])");
    r.stdin = "abc".into();
    let out = sb.run(&r).await;
    assert_eq!(
        (out.status, out.stdout.as_str(), out.exit_code),
        (RunStatus::Ok, "cba\n", Some(0)),
        "{out:?}"
    );
    assert!(out.max_rss_kb > 1000, "python uses memory: {out:?}");

    let out = run(&sb, Language::Bash, "echo $((6 * 7)); echo oops >&2; exit 3").await;
    assert_eq!(
        (out.status, out.stdout.as_str(), out.stderr.as_str(), out.exit_code),
        (RunStatus::RuntimeError, "42\n", "oops\n", Some(3))
    );

    let out = run(&sb, Language::C, "#include <stdio.h>\nint main(){int a,b;if(scanf(\"%d %d\",&a,&b)!=2)return 1;printf(\"%d\\n\",a+b);}").await;
    assert_eq!(out.status, RunStatus::RuntimeError, "no input: scanf fails: {out:?}");
    let mut r = req(
        Language::Cpp,
        "#include <iostream>\nint main(){long a,b;std::cin>>a>>b;std::cout<<a*b<<std::endl;}",
    );
    r.stdin = "6 7".into();
    let out = sb.run(&r).await;
    assert_eq!((out.status, out.stdout.as_str()), (RunStatus::Ok, "42\n"), "{out:?}");

    let out = run(&sb, Language::C, "int main( { return 0; }").await;
    assert_eq!(out.status, RunStatus::CompileError);
    assert!(out.stderr.contains("error"), "the compiler's message: {}", out.stderr);

    let out = run(&sb, Language::Python, "import os\nos.kill(os.getpid(), 11)").await;
    assert_eq!((out.status, out.signal), (RunStatus::RuntimeError, Some(11)));
    assert_clean(&sb).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_give_their_statuses() {
    let sb = sandbox().await;
    let limited = |code: &str, limits: Limits| RunRequest {
        language: Language::Python,
        code: code.into(),
        stdin: String::new(),
        limits,
    };

    let start = Instant::now();
    let out = sb
        .run(&limited("while True: pass", Limits { time_limit_ms: Some(500), ..Limits::default() }))
        .await;
    assert_eq!(out.status, RunStatus::Timeout, "{out:?}");
    assert!(start.elapsed() < Duration::from_secs(5));

    let out = sb
        .run(&limited(
            "import time\ntime.sleep(60)",
            Limits { time_limit_ms: Some(300), ..Limits::default() },
        ))
        .await;
    assert_eq!(out.status, RunStatus::Timeout, "sleeping is wall-clock time: {out:?}");

    let out = sb
        .run(&limited(
            "x = bytearray(400 * 1024 * 1024)\nprint(len(x))",
            Limits { memory_mb: Some(64), ..Limits::default() },
        ))
        .await;
    assert_eq!(out.status, RunStatus::MemoryLimit, "{out:?}");

    let out = sb
        .run(&limited(
            "while True: print('x' * 1000)",
            Limits { output_bytes: Some(10_000), ..Limits::default() },
        ))
        .await;
    assert_eq!(out.status, RunStatus::OutputLimit, "{out:?}");
    assert_eq!(out.stdout.len(), 10_000);
    assert_clean(&sb).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_tests_compiles_once_and_judges_each() {
    let sb = sandbox().await;
    let tests = vec![
        TestCase::lines("1 2", "3"),
        TestCase::lines("5 5", "10"),
        TestCase::lines("2 2", "5"),
    ];
    // The program counts its runs in /work: one compile, then three runs in one sandbox.
    let code = "#include <stdio.h>\nint main(){int a,b;scanf(\"%d %d\",&a,&b);printf(\"%d\\n\",a+b);\
FILE*f=fopen(\"runs\",\"a\");fputs(\"x\",f);fclose(f);return 0;}";
    let request = |code: &str, tests: &[TestCase], stop_on_failure| TestsRequest {
        language: Language::C,
        code: code.into(),
        tests: tests.to_vec(),
        limits: Limits::default(),
        stop_on_failure,
    };
    let outcomes = CodeRunner::run_tests(&sb, &request(code, &tests, false)).await.expect("run");
    let passed: Vec<bool> = outcomes.iter().map(|o| o.passed).collect();
    assert_eq!(passed, [true, true, false]);
    let early = CodeRunner::run_tests(&sb, &request(code, &tests[1..], true)).await.expect("run");
    assert_eq!(early.len(), 2);
    let broken =
        CodeRunner::run_tests(&sb, &request("int main(", &tests, true)).await.expect("run");
    assert!(broken.iter().all(|o| !o.passed && o.result.status == RunStatus::CompileError));
    assert_clean(&sb).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_runs_are_isolated_from_each_other() {
    let sb = sandbox().await;
    // Each run writes its own marker to /tmp and /work and checks that no other run's is there.
    let runs = (0..12).map(|i| {
        let sb = sb.clone();
        async move {
            let code = format!(
                "import os, time\nfor d in ('/tmp', '/work'):\n    others = [f for f in os.listdir(d) if f.startswith('marker')]\n    open(f'{{d}}/marker{i}', 'w').write('x')\n    print(len(others))\ntime.sleep(0.2)"
            );
            sb.run(&req(Language::Python, &code)).await
        }
    });
    for out in futures::future::join_all(runs).await {
        assert_eq!((out.status, out.stdout.as_str()), (RunStatus::Ok, "0\n0\n"), "{out:?}");
    }
    assert_clean(&sb).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_slot_starts_fresh() {
    // A slot is reused run after run, reset in between: nothing of a run may reach the next.
    let sb = sandbox().await;
    let slot = sb.slot().await.expect("slot");
    let first = r#"
import ctypes, os, subprocess
open("/work/left", "w").write("x"); open("/tmp/left", "w").write("x"); open("/dev/shm/left", "w").write("x")
libc = ctypes.CDLL(None)
print("shmget", libc.shmget(0, 4096, 0o1000 | 0o600) >= 0)
subprocess.Popen(["sleep", "1000"])
"#;
    let second = r#"
import os
print(sorted(os.listdir("/work")), os.listdir("/tmp"), os.listdir("/dev/shm"))
print("shm segments", len(open("/proc/sysvipc/shm").read().splitlines()) - 1)
print("processes", len([p for p in os.listdir("/proc") if p.isdigit()]))
"#;
    let python = |code: &str| {
        let sb = sb.clone();
        let code = code.to_owned();
        let slot = &slot;
        async move {
            slot.write_file("main.py", code.into_bytes(), 0o644).await.expect("write");
            let exec = sb.exec_request(vec!["/usr/bin/python3".into(), "main.py".into()], 5_000);
            slot.exec(exec, Vec::new(), Duration::from_secs(5), 1 << 16).await.expect("exec")
        }
    };
    let a = python(first).await;
    assert_eq!(String::from_utf8_lossy(&a.stdout), "shmget True\n", "{a:?}");
    slot.reset().await.expect("reset");
    let b = python(second).await;
    assert_eq!(
        String::from_utf8_lossy(&b.stdout),
        "['main.py'] [] []\nshm segments 0\nprocesses 2\n",
        "{b:?}"
    );
    assert_eq!(slot.runs(), 2);
    sb.retire(slot);
    assert_clean(&sb).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_exec_path_confines_the_same() {
    // An exec runs in a child forked ahead of time (after start-up, a reset, or an exec that
    // asked for it) or, failing that, forked on the spot; both must confine alike.
    let sb = sandbox().await;
    let slot = sb.session_slot().await.expect("slot");
    let probe = "grep -E '^(Uid|Gid|CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status | tr -s '\\t ' ' '; ls /proc/self/fd | sort | tr '\\n' ' '; echo";
    let mut seen = Vec::new();
    for warm_next in [true, true, false, false] {
        let mut exec = sb.exec_request(vec!["/bin/sh".into(), "-c".into(), probe.into()], 5_000);
        exec.warm_next = warm_next;
        let out = slot.exec(exec, Vec::new(), Duration::from_secs(5), 1 << 16).await.expect("exec");
        assert_eq!(out.code, Some(0), "{out:?}");
        seen.push(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    let uid = sb.config().inner_uid;
    let expected = format!(
        "Uid: {uid} {uid} {uid} {uid}\nGid: {uid} {uid} {uid} {uid}\nCapInh: 0000000000000000\n\
         CapPrm: 0000000000000000\nCapEff: 0000000000000000\nCapBnd: 0000000000000000\n\
         CapAmb: 0000000000000000\nNoNewPrivs: 1\nSeccomp: 2\n0 1 2 3 \n"
    );
    for (i, s) in seen.iter().enumerate() {
        assert_eq!(s, &expected, "exec {i}");
    }
    sb.retire(slot);
    assert_clean(&sb).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pre_imported_python_behaves_like_python() {
    let cfg = temper_sandbox::SandboxConfig {
        python_preimport: true,
        pool_size: 2,
        ..crate::support::config()
    };
    let sb = temper_sandbox::Sandbox::new(cfg).await.expect("sandbox");
    let limits = Limits::default();
    let py = |code: &str, stdin: &str| RunRequest {
        language: Language::Python,
        code: code.into(),
        stdin: stdin.into(),
        limits,
    };

    // The run is a fork of the interpreter, not a child of the sandbox's init.
    let out = sb.run(&py("import os\nprint(os.getppid() != 1, open(f'/proc/{os.getppid()}/cmdline').read()[:20])", "")).await;
    assert!(out.stdout.starts_with("True"), "{out:?}");
    let out =
        sb.run(&py("import sys\nprint(__name__, sys.argv, sys.stdin.read()[::-1])", "abc")).await;
    assert_eq!(
        (out.status, out.stdout.as_str()),
        (RunStatus::Ok, "__main__ ['main.py'] cba\n"),
        "{out:?}"
    );
    let out = sb.run(&py("import sys\nprint('x')\nsys.exit(3)", "")).await;
    assert_eq!(
        (out.status, out.exit_code, out.stdout.as_str()),
        (RunStatus::RuntimeError, Some(3), "x\n")
    );
    let out = sb.run(&py("raise ValueError('boom')", "")).await;
    assert_eq!((out.status, out.exit_code), (RunStatus::RuntimeError, Some(1)));
    assert!(out.stderr.contains("ValueError: boom"), "{out:?}");
    let out = sb
        .run(&RunRequest {
            limits: Limits { time_limit_ms: Some(400), ..limits },
            ..py("while True: pass", "")
        })
        .await;
    assert_eq!(out.status, RunStatus::Timeout, "{out:?}");

    // Runs share the interpreter's IPC namespace, so System V IPC is refused; its memory is out
    // of reach (it is not dumpable), and killing it only ends the run that did it.
    let out = sb.run(&py("import ctypes\nprint(ctypes.CDLL(None).shmget(0, 4096, 0o1000 | 0o600), ctypes.get_errno())", "")).await;
    assert_eq!(out.stdout, "-1 0\n", "{out:?}");
    let hostile = "import os\nparent = os.getppid()\ntry:\n    open(f'/proc/{parent}/mem', 'rb').read(1)\n    print('read')\nexcept OSError as e:\n    print('no', e.errno)\nos.kill(parent, 9)";
    let out = sb.run(&py(hostile, "")).await;
    assert!(!out.stdout.contains("read"), "{out:?}");
    for _ in 0..3 {
        let out = sb.run(&py("print(6 * 7)", "")).await;
        assert_eq!((out.status, out.stdout.as_str()), (RunStatus::Ok, "42\n"), "{out:?}");
    }
    assert_clean(&sb).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_helper_from_another_build_is_refused() {
    // A stand-in for a stale helper binary: it speaks the set-up message without a protocol
    // version, as helpers before versioning did.
    let stale = "import socket, time\ns = socket.socket(fileno=0)\ns.send(b'{\"t\":\"need_maps\"}')\ntime.sleep(5)";
    let cfg = temper_sandbox::SandboxConfig {
        helper: ("/usr/bin/python3".into(), vec!["-c".into(), stale.into()]),
        pool_size: 0,
        ..crate::support::config()
    };
    // The sandbox builds a slot when it starts, so it refuses to start, saying why.
    let err = temper_sandbox::Sandbox::new(cfg).await.expect_err("a stale helper must be refused");
    let message = err.to_string();
    assert!(
        message.contains("speaks protocol 0") && message.contains("another build"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_based_tests_pass_and_fail_correctly() {
    let sb = sandbox().await;
    // LiveCodeBench's functional layout: arguments one JSON value per line, the return as JSON.
    let call = |stdin: &str, expected: &str| TestCase {
        stdin: stdin.into(),
        expected_stdout: expected.into(),
        compare: Compare::Values,
    };
    let judge = |code: &str, name: &str, tests: Vec<TestCase>, limits: Limits| {
        let sb = sb.clone();
        let code = call_harness(code, name).expect("a valid name");
        async move {
            let request = TestsRequest {
                language: Language::Python,
                code,
                tests,
                limits,
                stop_on_failure: false,
            };
            let outcomes = CodeRunner::run_tests(&sb, &request).await.expect("run");
            outcomes.into_iter().map(|o| (o.passed, o.result.status)).collect::<Vec<_>>()
        }
    };
    let ok = |n: usize| vec![(true, RunStatus::Ok); n];
    let two_sum = "class Solution:\n    def twoSum(self, nums: List[int], target: int) -> List[int]:\n        seen = {}\n        for i, x in enumerate(nums):\n            if target - x in seen:\n                print('debug', i)\n                return (seen[target - x], i)\n            seen[x] = i\n";
    let tests = vec![call("[2,7,11,15]\n9", "[0, 1]"), call("[3,2,4]\n6", "[1,2]")];
    // A method of `Solution`, typing names without an import, a tuple for a list, a print that
    // must not count as output.
    assert_eq!(judge(two_sum, "twoSum", tests.clone(), Limits::default()).await, ok(2));
    // A wrong answer fails; so does a missing function.
    let wrong = two_sum.replace("(seen[target - x], i)", "(i, seen[target - x])");
    let got = judge(&wrong, "twoSum", tests.clone(), Limits::default()).await;
    assert_eq!(got, vec![(false, RunStatus::Ok); 2]);
    let got = judge(two_sum, "threeSum", tests, Limits::default()).await;
    assert!(got.iter().all(|(passed, status)| !passed && *status == RunStatus::RuntimeError));
    // Floats within the tolerance pass, outside it fail; a top-level function works too.
    let mean = "def mean(xs):\n    return sum(xs) / len(xs) + 1e-9\n";
    let floats = vec![call("[0.1, 0.2]", "0.15"), call("[1, 2]", "1.5"), call("[1, 2]", "1.6")];
    let got = judge(mean, "mean", floats, Limits::default()).await;
    assert_eq!(got, vec![(true, RunStatus::Ok), (true, RunStatus::Ok), (false, RunStatus::Ok)]);
    // An exception is a failed test, and so is running past the time limit.
    let raises = "class Solution:\n    def f(self, x):\n        return 1 // x\n";
    let got = judge(raises, "f", vec![call("2", "0"), call("0", "0")], Limits::default()).await;
    assert_eq!(got, vec![(true, RunStatus::Ok), (false, RunStatus::RuntimeError)]);
    let spins = "class Solution:\n    def f(self, x):\n        while x > 0:\n            pass\n        return x\n";
    let limits = Limits { time_limit_ms: Some(1_000), ..Limits::default() };
    let started = Instant::now();
    let got = judge(spins, "f", vec![call("0", "0"), call("1", "1")], limits).await;
    assert_eq!(got, vec![(true, RunStatus::Ok), (false, RunStatus::Timeout)]);
    assert!(started.elapsed() < Duration::from_secs(20), "{:?}", started.elapsed());
    // A solution's own `__main__` block does not run and cannot read the arguments.
    let main_block = "def f(x):\n    return x * 2\nif __name__ == '__main__':\n    import sys\n    print(sys.stdin.read())\n    raise SystemExit(1)\n";
    assert_eq!(judge(main_block, "f", vec![call("21", "42")], Limits::default()).await, ok(1));
    assert_clean(&sb).await;
}

/// The host's view of a running program: every one of its slot's cgroups (memory, pids and cpu
/// limits, the v2 group that kills) holds it, whether init was started in the v2 group by
/// `clone3` or the helper wrote itself into it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_is_in_every_cgroup_of_its_slot() {
    for clone_into_cgroup in [true, false] {
        let cfg = temper_sandbox::SandboxConfig { clone_into_cgroup, ..crate::support::config() };
        let sb = temper_sandbox::Sandbox::new(cfg).await.expect("the sandbox starts");
        let prefix = sb.cgroup_prefix();
        let running = {
            let sb = sb.clone();
            tokio::spawn(async move { run(&sb, Language::Bash, "sleep 1.5; echo done").await })
        };
        // The slot groups of this sandbox whose processes include `sleep`, per hierarchy.
        let holding_sleep = || {
            let mut found = Vec::new();
            for root in ["temper", "memory/temper", "pids/temper", "cpu/temper", "unified/temper"] {
                let Ok(entries) = std::fs::read_dir(format!("/sys/fs/cgroup/{root}")) else {
                    continue;
                };
                for entry in entries.filter_map(|e| e.ok()) {
                    if !entry.file_name().to_string_lossy().starts_with(&prefix) {
                        continue;
                    }
                    let procs = std::fs::read_to_string(entry.path().join("cgroup.procs"))
                        .unwrap_or_default();
                    let has_sleep = procs.lines().any(|pid| {
                        std::fs::read_to_string(format!("/proc/{pid}/comm"))
                            .is_ok_and(|c| c.trim() == "sleep")
                    });
                    if has_sleep {
                        found.push(root);
                    }
                }
            }
            found
        };
        let hierarchies: Vec<&str> = if std::path::Path::new("/sys/fs/cgroup/unified").is_dir() {
            vec!["memory/temper", "pids/temper", "cpu/temper", "unified/temper"]
        } else {
            vec!["temper"]
        };
        let deadline = Instant::now() + Duration::from_secs(1);
        let mut found = holding_sleep();
        while found != hierarchies && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
            found = holding_sleep();
        }
        assert_eq!(found, hierarchies, "clone_into_cgroup = {clone_into_cgroup}");
        let out = running.await.expect("the run task");
        assert_eq!((out.status, out.stdout.as_str()), (RunStatus::Ok, "done\n"), "{out:?}");
        assert_clean(&sb).await;
    }
}
