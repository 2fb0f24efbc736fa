//! The hostile suite of `shared/design/sandbox.md`: each program tries to escape or to harm
//! the host, and each test asserts containment and the expected status.

use std::net::TcpListener;
use std::time::Duration;

use temper_protocol::{Language, Limits, RunRequest, RunStatus, TestsRequest};

use crate::support::{assert_clean, run, sandbox, sandbox_processes};

/// A file on the host that no sandboxed program may read or change.
struct Canary {
    path: std::path::PathBuf,
    secret: String,
}

impl Canary {
    fn new() -> Self {
        let secret = format!("secret-{:x}", rand_u64());
        let path = std::env::temp_dir().join(format!("temper-canary-{}.txt", std::process::id()));
        std::fs::write(&path, &secret).expect("write canary");
        Self { path, secret }
    }

    fn assert_untouched(&self, output: &str) {
        assert!(!output.contains(&self.secret), "the canary leaked: {output}");
        assert_eq!(
            std::fs::read_to_string(&self.path).expect("canary"),
            self.secret,
            "the canary changed"
        );
    }
}

impl Drop for Canary {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(std::process::id().into());
    h.finish()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_files_are_out_of_reach() {
    let sb = sandbox().await;
    let canary = Canary::new();
    let p = canary.path.display();
    let code = format!(
        r#"
import os
tries = ["{p}", "/proc/1/root{p}", "/proc/self/root{p}", "/.old{p}", "/root/.bashrc", "/etc/shadow", "/home"]
for path in tries:
    try:
        print(path, open(path).read()[:80])
    except Exception as e:
        print(path, type(e).__name__)
for path in ["{p}", "/usr/temper-escape", "/etc/temper-escape", "/temper-escape", "/proc/temper-escape"]:
    try:
        open(path, "w").write("pwned")
        print("wrote", path)
    except Exception as e:
        print("no write", path, type(e).__name__)
print("root listing", sorted(os.listdir("/")))
"#
    );
    let out = run(&sb, Language::Python, &code).await;
    assert_eq!(out.status, RunStatus::Ok, "{out:?}");
    canary.assert_untouched(&out.stdout);
    // Writes land only in the sandbox's own /tmp (the canary's path there is a new, empty file).
    assert!(
        out.stdout.lines().filter(|l| l.starts_with("wrote")).all(|l| l.starts_with("wrote /tmp/")),
        "{}",
        out.stdout
    );
    for escape in ["/usr/temper-escape", "/etc/temper-escape", "/temper-escape"] {
        assert!(!std::path::Path::new(escape).exists(), "{escape} appeared on the host");
    }
    assert!(!out.stdout.contains("'root'") && !out.stdout.contains("'home'"), "{}", out.stdout);
    assert_clean(&sb).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proc_and_sys_show_nothing_of_the_host() {
    let sb = sandbox().await;
    let code = r#"
import os
pids = [p for p in os.listdir("/proc") if p.isdigit()]
print("pids", len(pids))
print("sys", os.path.exists("/sys/kernel"))
print("pid1", open("/proc/1/cmdline").read().replace("\0", " ")[:60])
print("hostname", os.uname().nodename)
for dev in ["/dev/sda", "/dev/vda", "/dev/mem", "/dev/kmsg", "/dev/tty"]:
    print("dev", dev, os.path.exists(dev))
"#;
    let out = run(&sb, Language::Python, code).await;
    assert_eq!(out.status, RunStatus::Ok, "{out:?}");
    // Only init and the program itself are visible.
    assert!(out.stdout.contains("pids 2\n"), "{}", out.stdout);
    assert!(out.stdout.contains("sys False"));
    assert!(out.stdout.contains("hostname sandbox"));
    assert!(!out.stdout.contains(" True"), "no host device is visible: {}", out.stdout);
    assert_clean(&sb).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_network_in_or_out() {
    let sb = sandbox().await;
    // A server on the host's loopback that the program must not reach.
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let code = format!(
        r#"
import socket
for host, port in [("127.0.0.1", {port}), ("10.0.2.2", 80), ("1.1.1.1", 53)]:
    s = socket.socket()
    s.settimeout(1)
    try:
        s.connect((host, port))
        print("connected", host)
    except OSError as e:
        print("refused", host, e.errno)
try:
    socket.getaddrinfo("pypi.org", 443)
    print("resolved")
except OSError:
    print("no dns")
srv = socket.socket()
try:
    srv.bind(("0.0.0.0", 18765)); srv.listen(1); print("listening inside")
except OSError as e:
    print("no listen", e.errno)
"#
    );
    let out = run(&sb, Language::Python, &code).await;
    assert_eq!(out.status, RunStatus::Ok, "{out:?}");
    assert!(
        !out.stdout.contains("connected") && !out.stdout.contains("resolved"),
        "{}",
        out.stdout
    );
    // A port bound inside the sandbox's own network namespace is not on the host.
    assert!(
        std::net::TcpStream::connect_timeout(
            &"127.0.0.1:18765".parse().expect("addr"),
            Duration::from_millis(200)
        )
        .is_err()
    );
    listener.set_nonblocking(true).expect("nonblocking");
    assert!(listener.accept().is_err(), "nothing reached the host's listener");
    assert_clean(&sb).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_unix_and_ip_sockets_open_and_never_raw_ones() {
    let sb = sandbox().await;
    // The host's vsock port must stay free: a network namespace does not cover vsock.
    let code = r#"
import errno, socket
def attempt(name, family, kind):
    try:
        s = socket.socket(family, kind)
    except OSError as e:
        print(name, errno.errorcode.get(e.errno, e.errno))
        return
    try:
        if family == socket.AF_VSOCK:
            s.bind((socket.VMADDR_CID_ANY, 47483))
        print(name, "OPENED")
    except OSError as e:
        print(name, "opened, then", errno.errorcode.get(e.errno, e.errno))
attempt("vsock", socket.AF_VSOCK, socket.SOCK_STREAM)
attempt("netlink", socket.AF_NETLINK, socket.SOCK_RAW)
attempt("netlink_dgram", socket.AF_NETLINK, socket.SOCK_DGRAM)
attempt("packet", socket.AF_PACKET, socket.SOCK_RAW)
attempt("packet_dgram", socket.AF_PACKET, socket.SOCK_DGRAM)
attempt("raw_ip", socket.AF_INET, socket.SOCK_RAW)
attempt("raw_ip6", socket.AF_INET6, socket.SOCK_RAW | socket.SOCK_NONBLOCK)
attempt("bluetooth", 31, socket.SOCK_STREAM)
attempt("tcp", socket.AF_INET, socket.SOCK_STREAM)
attempt("udp6", socket.AF_INET6, socket.SOCK_DGRAM)
attempt("unix", socket.AF_UNIX, socket.SOCK_STREAM)
a, b = socket.socketpair()
a.send(b"ping"); print("socketpair", b.recv(4).decode())
try:
    socket.socketpair(socket.AF_VSOCK)
    print("vsock_pair OPENED")
except OSError as e:
    print("vsock_pair", errno.errorcode.get(e.errno, e.errno))
"#;
    let out = run(&sb, Language::Python, code).await;
    assert_eq!(out.status, RunStatus::Ok, "{out:?}");
    let verdicts: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(
        verdicts,
        [
            "vsock EAFNOSUPPORT",
            "netlink EAFNOSUPPORT",
            "netlink_dgram EAFNOSUPPORT",
            "packet EAFNOSUPPORT",
            "packet_dgram EAFNOSUPPORT",
            "raw_ip EPERM",
            "raw_ip6 EPERM",
            "bluetooth EAFNOSUPPORT",
            "tcp OPENED",
            "udp6 OPENED",
            "unix OPENED",
            "socketpair ping",
            "vsock_pair EAFNOSUPPORT",
        ],
        "{}",
        out.stdout
    );
    assert_clean(&sb).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_past_the_ceilings_are_clamped() {
    let cfg = temper_sandbox::SandboxConfig {
        max_time_limit_ms: 1_000,
        max_memory_mb: 128,
        max_output_bytes: 64 << 10,
        time_limit_ms: 1_000,
        memory_mb: 128,
        output_bytes: 64 << 10,
        ..crate::support::config()
    };
    let sb = temper_sandbox::Sandbox::new(cfg).await.expect("sandbox");
    let ask = |code: &str, limits: Limits| RunRequest {
        language: Language::Bash,
        code: code.into(),
        stdin: String::new(),
        limits,
    };
    // Asking for 1.6 GB of output keeps 64 KiB and says so.
    let huge_output = Limits { output_bytes: Some(1_600_000_000), ..Limits::default() };
    let out = sb.run(&ask("head -c 1500000000 /dev/zero", huge_output)).await;
    assert_eq!(out.status, RunStatus::OutputLimit, "{:?}", out.status);
    assert_eq!(out.stdout.len(), 64 << 10);
    // 100 GB of memory asked, 128 MiB given: a 600 MB allocation is stopped.
    let python =
        |code: &str, limits: Limits| RunRequest { language: Language::Python, ..ask(code, limits) };
    for memory_mb in [100_000, (1 << 44) + 1, u64::MAX] {
        let limits = Limits { memory_mb: Some(memory_mb), ..Limits::default() };
        let out = sb.run(&python("x = bytearray(600 << 20)\nprint(len(x))", limits)).await;
        assert_eq!(out.status, RunStatus::MemoryLimit, "memory_mb {memory_mb}: {out:?}");
    }
    // An unbounded wall-clock limit is the ceiling's second.
    let start = std::time::Instant::now();
    let forever = Limits { time_limit_ms: Some(u64::MAX), ..Limits::default() };
    let out = sb.run(&ask("sleep 100", forever)).await;
    assert_eq!(out.status, RunStatus::Timeout, "{out:?}");
    assert!(start.elapsed() < Duration::from_secs(10), "{:?}", start.elapsed());
    // A configuration past the hard ceilings does not start.
    let err = temper_sandbox::Sandbox::new(temper_sandbox::SandboxConfig {
        memory_mb: 1 << 30,
        max_memory_mb: 1 << 30,
        ..crate::support::config()
    })
    .await
    .unwrap_err();
    assert!(err.to_string().contains("max_memory_mb"), "{err}");
    assert_clean(&sb).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_core_dump_reaches_any_handler() {
    let sb = sandbox().await;
    // RLIMIT_CORE of 1 (not 0) stops pipe handlers too, and the program cannot raise it.
    let code = "import resource\nprint(resource.getrlimit(resource.RLIMIT_CORE))\ntry:\n    resource.setrlimit(resource.RLIMIT_CORE, (1 << 30, 1 << 30))\n    print('RAISED')\nexcept ValueError as e:\n    print('refused')\n";
    let out = run(&sb, Language::Python, code).await;
    assert_eq!(out.stdout, "(1, 1)\nrefused\n", "{out:?}");
    assert_clean(&sb).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dangerous_syscalls_are_refused() {
    let sb = sandbox().await;
    let code = r#"
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/keyctl.h>
static void show(const char *name, long r) { printf("%s %s\n", name, r == -1 ? strerror(errno) : "ALLOWED"); }
int main(void) {
    show("mount", mount("none", "/tmp", "tmpfs", 0, NULL));
    show("unshare_user", unshare(CLONE_NEWUSER));
    show("unshare_net", unshare(CLONE_NEWNET));
    show("ptrace", ptrace(PTRACE_ATTACH, 1, 0, 0));
    show("bpf", syscall(SYS_bpf, 0, 0, 0));
    show("keyctl", syscall(SYS_keyctl, KEYCTL_GET_KEYRING_ID, -1, 0));
    show("io_uring", syscall(SYS_io_uring_setup, 1, 0));
    show("perf", syscall(SYS_perf_event_open, 0, 0, -1, -1, 0));
    show("userfaultfd", syscall(SYS_userfaultfd, 0));
    show("personality", syscall(SYS_personality, 0x0008));
    show("x32_getpid", syscall(0x40000000 | 39));
    show("clone_newpid", syscall(SYS_clone, CLONE_NEWPID | 17, 0, 0, 0, 0));
    show("kexec", syscall(SYS_kexec_load, 0, 0, 0, 0));
    show("setns", syscall(SYS_setns, 0, 0));
    show("mknod", syscall(SYS_mknod, "/tmp/dev", 0020644, 0x0801));
    show("chroot", chroot("/tmp"));
    show("sethostname", sethostname("x", 1));
    return 0;
}
"#;
    let out = run(&sb, Language::C, code).await;
    assert_eq!(out.status, RunStatus::Ok, "{out:?}");
    assert!(!out.stdout.contains("ALLOWED"), "{}", out.stdout);
    assert_eq!(out.stdout.lines().count(), 17, "{}", out.stdout);

    // A 32-bit system call (int 0x80) from a 64-bit program kills it (SIGSYS) before it runs.
    let int80 = r#"
#include <stdio.h>
int main(void) {
    long r;
    __asm__ volatile ("int $0x80" : "=a"(r) : "a"(20L) : "memory");
    printf("ALLOWED %ld\n", r);
    return 0;
}
"#;
    let out = run(&sb, Language::C, int80).await;
    assert_eq!(out.status, RunStatus::RuntimeError, "{out:?}");
    assert_eq!(out.signal, Some(libc::SIGSYS), "{out:?}");
    assert!(!out.stdout.contains("ALLOWED"), "{}", out.stdout);
    assert_clean(&sb).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resource_bombs_are_contained() {
    let sb = sandbox().await;
    let limits = |ms| Limits { time_limit_ms: Some(ms), ..Limits::default() };
    let cases = [
        // fork bomb: pids.max stops it; the run times out or fails, and nothing survives it.
        (Language::Bash, "bomb() { bomb | bomb & }; bomb; sleep 5", limits(2_000)),
        (
            Language::Python,
            "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
            limits(2_000),
        ),
        // disk fill: /work is a 64 MiB tmpfs and files are capped.
        (
            Language::Python,
            "f = open('/work/big', 'wb')\nwhile True: f.write(b'x' * (1 << 20))",
            limits(5_000),
        ),
        (
            Language::Python,
            "f = open('/tmp/big', 'wb')\nwhile True: f.write(b'x' * (1 << 20))",
            limits(5_000),
        ),
        // descriptor exhaustion
        (Language::Python, "fs = []\nwhile True: fs.append(open('/dev/null'))", limits(5_000)),
        // raising limits back
        (
            Language::Python,
            "import resource\nresource.setrlimit(resource.RLIMIT_NOFILE, (1 << 20, 1 << 20))",
            limits(5_000),
        ),
    ];
    for (language, code, limits) in cases {
        let out =
            sb.run(&RunRequest { language, code: code.into(), stdin: String::new(), limits }).await;
        assert!(
            matches!(
                out.status,
                RunStatus::RuntimeError | RunStatus::Timeout | RunStatus::MemoryLimit
            ),
            "{code}: {out:?}"
        );
    }
    let out = run(
        &sb,
        Language::Python,
        "import resource\nprint(resource.getrlimit(resource.RLIMIT_NOFILE))",
    )
    .await;
    assert_eq!(out.stdout, "(256, 256)\n", "{out:?}");
    assert_clean(&sb).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_outlives_a_run_and_host_processes_are_unharmed() {
    let sb = sandbox().await;
    let mut host = std::process::Command::new("sleep").arg("30").spawn().expect("a host process");
    let code = format!(
        r#"
import os, signal, subprocess
# A daemon that double-forks and ignores SIGHUP, and a process that leaves the session.
subprocess.Popen(["sh", "-c", "(setsid sleep 1000 &) ; nohup sleep 1000 >/dev/null 2>&1 &"])
for pid in [{host}, 1, -1]:
    try:
        os.kill(pid, signal.SIGKILL)
        print("killed", pid)
    except OSError as e:
        print("no", pid, e.errno)
"#,
        host = host.id()
    );
    let out = run(&sb, Language::Python, &code).await;
    assert!(
        out.stdout.contains(&format!("no {} 3", host.id())),
        "the host pid is not even visible: {out:?}"
    );
    assert!(host.try_wait().expect("wait").is_none(), "the host process survived");
    host.kill().expect("kill");
    let _ = host.wait();
    assert_clean(&sb).await;
    // No process of the sandbox's users is left on the host.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while std::time::Instant::now() < deadline
        && !sandbox_processes(sb.config()).iter().all(|p| p.contains("Z"))
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let left: Vec<String> = sandbox_processes(sb.config())
        .into_iter()
        .filter(|p| {
            std::fs::read_to_string(format!(
                "/proc/{}/cmdline",
                p.split_whitespace().next().unwrap_or("")
            ))
            .is_ok_and(|c| c.contains("sleep"))
        })
        .collect();
    assert!(left.is_empty(), "survivors: {left:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_supervisor_never_follows_a_link_the_program_made() {
    let sb = sandbox().await;
    let slot = sb.slot().await.expect("slot");
    slot.write_file("prog.sh", b"ln -s /etc/passwd /work/out; ln -s /proc/1/environ /work/env; mkdir -p /work/d; ln -s / /work/d/up".to_vec(), 0o644)
        .await
        .expect("write");
    let exec = temper_sandbox_exec(&sb, &["/bin/bash", "prog.sh"]);
    slot.exec(exec, Vec::new(), Duration::from_secs(5), 1 << 20).await.expect("exec");
    for path in ["out", "env", "d/up/etc/passwd"] {
        let read = slot.read_file(path, 1 << 20).await;
        assert!(read.is_err(), "{path}: the supervisor followed a link: {read:?}");
    }
    // Writing through the planted links is refused too.
    assert!(slot.write_file("out", b"x".to_vec(), 0o644).await.is_err());
    assert!(slot.write_file("d/up/tmp/x", b"x".to_vec(), 0o644).await.is_err());
    slot.destroy().await;
    assert_clean(&sb).await;
}

/// An exec request for a raw command in a slot.
fn temper_sandbox_exec(sb: &temper_sandbox::Sandbox, argv: &[&str]) -> temper_sandbox::Exec {
    sb.exec_request(argv.iter().map(|s| (*s).to_owned()).collect(), 5_000)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reward_hacks_do_not_pass_tests() {
    use temper_protocol::TestCase;
    use temper_verify::code::CodeRunner;
    let sb = sandbox().await;
    let tests = vec![TestCase::lines("2 3", "5"), TestCase::lines("4 4", "8")];
    let hacks = [
        "import sys\nsys.exit(0)",
        "print('PASS')\nprint('All tests passed')",
        "import os\nos._exit(0)",
        "import glob\nprint(glob.glob('/**/*expected*', recursive=True))",
    ];
    for hack in hacks {
        let request = TestsRequest {
            language: Language::Python,
            code: hack.into(),
            tests: tests.clone(),
            limits: Limits::default(),
            stop_on_failure: false,
        };
        let outcomes = CodeRunner::run_tests(&sb, &request).await.expect("run");
        assert!(outcomes.iter().all(|o| !o.passed), "{hack} passed a test");
    }
    assert_clean(&sb).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_of_a_pre_imported_slot_share_nothing() {
    // A slot with a pre-imported Python keeps that interpreter across resets. Neither an ordinary
    // program before it nor a run forked from it may leave anything for the next run: no System V
    // object, no process.
    let cfg = temper_sandbox::SandboxConfig {
        python_preimport: true,
        pool_size: 1,
        ..crate::support::config()
    };
    let sb = temper_sandbox::Sandbox::new(cfg).await.expect("sandbox");
    let slot = sb.slot().await.expect("slot");
    assert!(slot.has_zygote());
    let python = |code: &str| {
        let code = code.to_owned();
        let (sb, slot) = (&sb, &slot);
        async move {
            slot.write_file("prog.py", code.into_bytes(), 0o644).await.expect("write");
            let exec = temper_sandbox_exec(sb, &["/usr/bin/python3", "prog.py"]);
            slot.exec(exec, Vec::new(), Duration::from_secs(5), 1 << 16).await.expect("exec")
        }
    };
    let queues = "print('queues', len(open('/proc/sysvipc/msg').read().splitlines()) - 1)";
    // An ordinary program (as a C or bash run is) makes a message queue and leaves it.
    let make = "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nprint('made', libc.msgget(4242, 0o1000 | 0o666) >= 0)";
    let out = python(make).await;
    assert_eq!(String::from_utf8_lossy(&out.stdout), "made True\n", "{out:?}");
    // A run of the pre-imported Python, in the same job, does not see it.
    slot.write_file("main.py", queues.as_bytes().to_vec(), 0o644).await.expect("write");
    let out = slot.zygote_run(5, Vec::new(), Duration::from_secs(5), 1 << 16).await.expect("run");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "queues 0\n", "{out:?}");

    // A pre-imported run leaves a daemon behind; it is gone before the next request.
    let daemon = "import subprocess\nsubprocess.Popen(['sleep', '1000'], start_new_session=True)\nprint('left')";
    slot.write_file("main.py", daemon.as_bytes().to_vec(), 0o644).await.expect("write");
    let out = slot.zygote_run(5, Vec::new(), Duration::from_secs(5), 1 << 16).await.expect("run");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "left\n", "{out:?}");
    let count = "import os\nprint('sleepers', sum(b'sleep' in open(f'/proc/{p}/cmdline', 'rb').read() for p in os.listdir('/proc') if p.isdigit()))";
    let out = python(count).await;
    assert_eq!(String::from_utf8_lossy(&out.stdout), "sleepers 0\n", "{out:?}");

    // After a reset, neither kind of run sees a queue of the earlier job.
    slot.reset().await.expect("reset");
    let out = python(queues).await;
    assert_eq!(String::from_utf8_lossy(&out.stdout), "queues 0\n", "{out:?}");
    slot.write_file("main.py", queues.as_bytes().to_vec(), 0o644).await.expect("write");
    let out = slot.zygote_run(5, Vec::new(), Duration::from_secs(5), 1 << 16).await.expect("run");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "queues 0\n", "{out:?}");
    sb.retire(slot);
    assert_clean(&sb).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_request_breaks_the_slot_instead_of_answering_the_next() {
    // A caller that gives up on an exec (its future dropped) leaves the reply owed; the next
    // request must not take that reply for its own.
    let sb = sandbox().await;
    let mut slot = sb.session_slot().await.expect("slot");
    let exec = temper_sandbox_exec(&sb, &["/bin/sh", "-c", "sleep 0.3; echo first"]);
    let abandoned = tokio::time::timeout(
        Duration::from_millis(50),
        slot.exec(exec, Vec::new(), Duration::from_secs(5), 1 << 16),
    )
    .await;
    assert!(abandoned.is_err(), "the exec should still have been running");
    tokio::time::sleep(Duration::from_millis(400)).await;
    let exec = temper_sandbox_exec(&sb, &["/bin/sh", "-c", "echo second"]);
    let next = slot.exec(exec, Vec::new(), Duration::from_secs(5), 1 << 16).await;
    assert!(next.is_err(), "{next:?}");
    assert!(!slot.is_usable());
    sb.retire(slot);
    assert_clean(&sb).await;
}

/// Run by [`a_killed_supervisor_leaves_no_cgroups`] as a child process: a sandbox with warm
/// slots that says so and waits to be killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a child of a_killed_supervisor_leaves_no_cgroups"]
async fn killed_supervisor_child() {
    let sb = sandbox().await;
    let out = run(&sb, Language::Bash, "echo warm").await;
    assert_eq!(out.stdout, "warm\n");
    #[allow(clippy::print_stdout)]
    {
        println!("ready");
    }
    tokio::time::sleep(Duration::from_secs(120)).await;
}

#[test]
fn a_killed_supervisor_leaves_no_cgroups() {
    use std::io::BufRead;
    let mut child = std::process::Command::new(std::env::current_exe().expect("exe"))
        .args(["--exact", "hostile::killed_supervisor_child", "--ignored", "--nocapture"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let pid = child.id();
    let mut lines = std::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
    let ready = lines.find(|l| l.as_ref().is_ok_and(|l| l.trim() == "ready"));
    assert!(ready.is_some(), "the child never got ready");
    let prefix = format!("slot-{pid}-");
    assert!(!crate::support::slot_cgroups(&prefix).is_empty(), "the child holds slots");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::SIGKILL)
        .expect("kill");
    // Not waited for yet: the dead supervisor stays a zombie, with a /proc entry, meanwhile.
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let left = crate::support::slot_cgroups(&prefix);
        if left.is_empty() {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "left behind after SIGKILL: {left:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    child.wait().expect("wait");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_of_many_tests_share_one_output_budget() {
    let cfg = temper_sandbox::SandboxConfig {
        max_output_bytes: 16 << 10,
        output_bytes: 16 << 10,
        ..crate::support::config()
    };
    let sb = temper_sandbox::Sandbox::new(cfg).await.expect("sandbox");
    let tests: Vec<temper_protocol::TestCase> =
        (0..40).map(|_| temper_protocol::TestCase::lines("", "y")).collect();
    let total = |outcomes: &[temper_verify::code::TestOutcome]| -> usize {
        outcomes.iter().map(|o| o.result.stdout.len() + o.result.stderr.len()).sum()
    };
    // Each run prints 16 KiB: 40 tests would return 640 KiB without the shared budget.
    let chatty = "head -c 100000 /dev/zero | tr '\\0' x";
    let outcomes = sb.run_tests(Language::Bash, chatty, &tests, Limits::default(), false).await;
    let outcomes = outcomes.expect("runs");
    assert_eq!(outcomes.len(), 40);
    assert!(outcomes.iter().all(|o| o.result.status == RunStatus::OutputLimit));
    assert!(total(&outcomes) <= 32 << 10, "{} bytes returned", total(&outcomes));
    // A compile error is copied into every test's result: under the same budget.
    let broken = format!("int main(void) {{ {} }}", "undeclared_function_name();".repeat(400));
    let outcomes = sb.run_tests(Language::C, &broken, &tests, Limits::default(), false).await;
    let outcomes = outcomes.expect("runs");
    assert!(outcomes.iter().all(|o| o.result.status == RunStatus::CompileError));
    assert!(!outcomes[0].result.stderr.is_empty());
    assert!(total(&outcomes) <= 32 << 10, "{} bytes returned", total(&outcomes));
    assert_clean(&sb).await;
}
