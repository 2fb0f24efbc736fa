//! The slot helper: builds the isolation, then serves exec and file requests.
//!
//! Two processes. The first ("S") joins the slot's v1 cgroups, drops host groups, enters a new
//! user namespace, waits for the supervisor to write its uid/gid maps, enters new mount,
//! network, IPC, UTS and PID namespaces and starts the second ("init"), PID 1 of the new PID
//! namespace, inside the slot's v2 cgroup; both then become root of the user namespace (an
//! unprivileged uid on the host), init enters a new cgroup namespace, and S only waits.
//! Init builds a fresh root (a small tmpfs with the runtime bound read-only, new `/proc`, a few
//! device nodes, size-capped tmpfs `/work` and `/tmp`), pivots into it, and serves requests.
//! Each exec runs in a child of init that sets no-new-privileges, installs the seccomp filter,
//! takes its descriptors, sets rlimits, becomes the unprivileged inner uid (dropping every
//! capability) and executes the program. Init forks that child ahead of time when it expects an
//! exec (after start-up, after a reset, and after an exec that asks for it): the "spare" waits,
//! already under the filter, for its exec, so the fork and the filter's attachment are off the
//! request path. When the program ends, init kills every other process of the namespace, so
//! nothing it started survives it.
//!
//! Any failure before `Ready` is reported as `SetupFailed` and nothing runs: the sandbox fails
//! closed.
#![expect(unsafe_code, reason = "fork, credentials, namespaces and seccomp need raw system calls")]

use std::ffi::CString;
use std::fs;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, FromRawFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::Path;

use rustix::event::{PollFd, PollFlags};
use rustix::mount::{MountFlags, MountPropagationFlags, UnmountFlags};
use rustix::net::{AddressFamily, SocketFlags, SocketType};
use rustix::process::{Pid, PidfdFlags, Signal};
use seccompiler::BpfProgram;

use super::seccomp;
use crate::chan;
use crate::wire::{Exec, FromSlot, SlotSpec, ToSlot};

type Result<T> = std::result::Result<T, String>;

fn os(step: &str) -> impl FnOnce(io::Error) -> String + '_ {
    move |e| format!("{step}: {e}")
}

fn rx(step: &str) -> impl FnOnce(rustix::io::Errno) -> String + '_ {
    move |e| format!("{step}: {}", io::Error::from(e))
}

fn check(step: &str, r: libc::c_int) -> Result<()> {
    if r < 0 { Err(format!("{step}: {}", io::Error::last_os_error())) } else { Ok(()) }
}

/// Entry point of the helper: `args` are the arguments after the helper flag.
pub fn helper_main(args: &[String]) -> ! {
    let code = match helper(args) {
        Ok(code) => code,
        Err(message) => {
            let _ = writeln!(io::stderr(), "temper sandbox helper: {message}");
            70
        }
    };
    std::process::exit(code)
}

fn helper(args: &[String]) -> Result<i32> {
    if let [flag, supervisor] = args
        && flag == super::REAPER_ARG
    {
        let pid = supervisor.parse().map_err(|_| format!("bad supervisor pid `{supervisor}`"))?;
        crate::cgroup::reap_after(pid);
        return Ok(0);
    }
    let [fd, spec] = args else { return Err("usage: __sandbox-slot FD SPEC".into()) };
    let fd: i32 = fd.parse().map_err(|_| format!("bad descriptor `{fd}`"))?;
    // SAFETY: the supervisor passed this descriptor, open and owned by nobody else here.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    let spec: SlotSpec = serde_json::from_str(spec).map_err(|e| format!("bad spec: {e}"))?;
    match first_stage(&sock, &spec) {
        Ok(code) => Ok(code),
        Err(message) => {
            let _ =
                chan::send(sock.as_fd(), &FromSlot::SetupFailed { message: message.clone() }, &[]);
            Err(message)
        }
    }
}

/// S: the slot's v1 cgroups, user namespace, maps, the other namespaces, init started in the
/// slot's v2 cgroup.
fn first_stage(sock: &OwnedFd, spec: &SlotSpec) -> Result<i32> {
    // Init (inherits this) should be the last the OOM killer picks in the slot. Lowering the
    // score needs CAP_SYS_RESOURCE, which some hosts withhold even from root; programs raise
    // theirs to 1000 anyway, so the killer takes them first either way.
    let _ = fs::write("/proc/self/oom_score_adj", b"-1000");
    // A thread that moves itself (`0`) through `tasks` takes none of the kernel's global locks
    // (see `SlotCgroups`); this process has one thread, so it moves whole.
    for dir in &spec.cgroups.v1 {
        fs::write(Path::new(dir).join("tasks"), b"0").map_err(os(&format!("join {dir}")))?;
    }
    let v2 = rustix::fs::open(
        &spec.cgroups.v2,
        rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .map_err(rx(&format!("open {}", spec.cgroups.v2)))?;
    rustix::thread::set_thread_groups(&[]).map_err(rx("setgroups"))?;
    // SAFETY: unshare affects only this single-threaded process.
    check("unshare(user)", unsafe { libc::unshare(libc::CLONE_NEWUSER) })?;
    chan::send(sock.as_fd(), &FromSlot::NeedMaps { protocol: crate::wire::PROTOCOL }, &[])
        .map_err(os("send"))?;
    match chan::recv::<ToSlot>(sock.as_fd()).map_err(os("recv"))? {
        Some((ToSlot::MapsDone, _)) => {}
        other => return Err(format!("expected maps_done, got {other:?}")),
    }
    // The namespaces are made, and init started, while this process still has the host uid it
    // came with: starting a process in a cgroup checks, as a write to the group's `cgroup.procs`
    // would, that the caller may write that file, which the host's root owns. The capabilities
    // these steps need are those of the new user namespace, which this process has whole. The
    // cgroup namespace is init's to make, once it is in its groups (its root is then the slot's
    // groups).
    let flags = libc::CLONE_NEWNS
        | libc::CLONE_NEWNET
        | libc::CLONE_NEWIPC
        | libc::CLONE_NEWUTS
        | libc::CLONE_NEWPID;
    // SAFETY: as above.
    check("unshare(namespaces)", unsafe { libc::unshare(flags) })?;
    let pid = fork_into(&v2, &spec.cgroups)?;
    if pid == 0 {
        let start = || -> Result<()> {
            become_namespace_root()?;
            // SAFETY: as above, for init, the single thread of this process.
            check("unshare(cgroup)", unsafe { libc::unshare(libc::CLONE_NEWCGROUP) })?;
            init(sock, spec)
        };
        let code = match start() {
            Ok(()) => 0,
            Err(message) => {
                let _ = chan::send(sock.as_fd(), &FromSlot::SetupFailed { message }, &[]);
                71
            }
        };
        std::process::exit(code);
    }
    drop(v2);
    // S keeps no host identity: it only waits for init from here on.
    let outcome = become_namespace_root().and_then(|()| {
        // The death signal is cleared by credential changes, so it is set after them.
        rustix::process::set_parent_process_death_signal(Some(Signal::KILL))
            .map_err(rx("pdeathsig"))?;
        if rustix::process::getppid().is_none_or(|p| p.as_raw_nonzero().get() == 1) {
            return Err("the supervisor is gone".into());
        }
        Ok(())
    });
    // On an error init's death signal ends it with this process.
    outcome?;
    chan::send(sock.as_fd(), &FromSlot::Init { pid }, &[]).map_err(os("send"))?;
    let mut status = 0;
    // SAFETY: waits for our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    Ok(if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        128 + libc::WTERMSIG(status)
    })
}

/// Becomes root of the user namespace (an unprivileged uid on the host), keeping the
/// namespace's capabilities.
fn become_namespace_root() -> Result<()> {
    let root_gid = rustix::process::Gid::ROOT;
    let root_uid = rustix::process::Uid::ROOT;
    rustix::thread::set_thread_res_gid(root_gid, root_gid, root_gid).map_err(rx("setresgid"))?;
    rustix::thread::set_thread_res_uid(root_uid, root_uid, root_uid).map_err(rx("setresuid"))?;
    // The uid change made this process non-dumpable, which hands its /proc files to the host's
    // root, out of reach inside the namespace; init and programs need /proc/self (oom score).
    rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::Dumpable)
        .map_err(rx("dumpable"))
}

/// `CLONE_INTO_CGROUP` (Linux 5.7); the `libc` crate's constant has the wrong width.
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// Forks init into the slot's v2 cgroup `v2` (a descriptor of its directory): `clone3` with
/// `CLONE_INTO_CGROUP`, or, where that is turned off or the kernel refuses `clone3`, a write of
/// this process into the group's `cgroup.procs` and a plain fork. Returns as `fork` does: 0 in
/// the child, the child's pid in the parent.
fn fork_into(v2: &OwnedFd, cgroups: &crate::wire::SlotCgroups) -> Result<libc::pid_t> {
    use std::os::fd::AsRawFd;
    if cgroups.clone_into {
        let args = libc::clone_args {
            flags: CLONE_INTO_CGROUP,
            pidfd: 0,
            child_tid: 0,
            parent_tid: 0,
            exit_signal: libc::SIGCHLD as u64,
            stack: 0,
            stack_size: 0,
            tls: 0,
            set_tid: 0,
            set_tid_size: 0,
            cgroup: v2.as_raw_fd() as u64,
        };
        // SAFETY: without CLONE_VM or a stack this is a fork: the child gets a copy of this
        // process, which has one thread, and returns here with 0, free to run any code.
        let pid = unsafe {
            libc::syscall(libc::SYS_clone3, &args as *const libc::clone_args, size_of_val(&args))
        };
        if pid >= 0 {
            return Ok(pid as libc::pid_t);
        }
        let e = io::Error::last_os_error();
        // ENOSYS: no clone3 (before 5.3, or a container's seccomp profile); EINVAL or E2BIG: no
        // CLONE_INTO_CGROUP (before 5.7); EPERM: a filter that refuses it. Anything else is
        // an answer about the group itself.
        if !matches!(
            e.raw_os_error(),
            Some(libc::ENOSYS | libc::EINVAL | libc::E2BIG | libc::EPERM)
        ) {
            return Err(format!("start init in {}: {e}", cgroups.v2));
        }
    }
    fs::write(Path::new(&cgroups.v2).join("cgroup.procs"), b"0")
        .map_err(os(&format!("join {}", cgroups.v2)))?;
    // SAFETY: this process has one thread, so the child may run arbitrary code after fork.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(format!("fork: {}", io::Error::last_os_error()));
    }
    Ok(pid)
}

/// Init: the new root, then the request loop.
fn init(sock: &OwnedFd, spec: &SlotSpec) -> Result<()> {
    rustix::process::set_parent_process_death_signal(Some(Signal::KILL))
        .map_err(rx("pdeathsig"))?;
    build_root(spec)?;
    // The filter for programs in their own IPC namespace, and the one for programs sharing it.
    let filters = [seccomp::program(false)?, seccomp::program(true)?];
    // Programs can never gain a capability through exec: the bounding set is emptied once here
    // (init keeps the capabilities it has, which it needs for resets).
    for cap in 0..64 {
        // SAFETY: PR_CAPBSET_DROP on this process; unknown capabilities give EINVAL, ignored.
        unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) };
    }
    chan::send(sock.as_fd(), &FromSlot::Ready, &[]).map_err(os("send"))?;
    serve(sock, spec, &filters);
    Ok(())
}

fn mkdir(path: &str, mode: u32) -> Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(mode)
        .create(path)
        .map_err(|e| format!("mkdir {path}: {e}"))
}

fn tmpfs(target: &str, size_mb: u64, mode: &str, flags: MountFlags) -> Result<()> {
    let data = CString::new(format!("size={size_mb}m,mode={mode}")).map_err(|e| e.to_string())?;
    rustix::mount::mount("tmpfs", target, "tmpfs", flags, data.as_c_str())
        .map_err(rx(&format!("mount tmpfs on {target}")))
}

/// Mount flags of the filesystem at `path` that a remount inside a user namespace must keep.
fn locked_flags(path: &str) -> Result<MountFlags> {
    let st = rustix::fs::statvfs(path).map_err(rx(&format!("statvfs {path}")))?;
    let f = st.f_flag;
    let mut flags = MountFlags::empty();
    for (st_flag, ms_flag) in [
        (rustix::fs::StatVfsMountFlags::NOEXEC, MountFlags::NOEXEC),
        (rustix::fs::StatVfsMountFlags::NOATIME, MountFlags::NOATIME),
        (rustix::fs::StatVfsMountFlags::NODIRATIME, MountFlags::NODIRATIME),
        (rustix::fs::StatVfsMountFlags::RELATIME, MountFlags::RELATIME),
    ] {
        if f.contains(st_flag) {
            flags |= ms_flag;
        }
    }
    Ok(flags)
}

/// Binds `source` read-only at `target`.
fn bind_ro(source: &str, target: &str) -> Result<()> {
    let meta = fs::metadata(source).map_err(|e| format!("bind {source}: {e}"))?;
    if meta.is_dir() {
        mkdir(target, 0o755)?;
    } else {
        if let Some(parent) = Path::new(target).parent() {
            mkdir(&parent.to_string_lossy(), 0o755)?;
        }
        fs::write(target, b"").map_err(|e| format!("create {target}: {e}"))?;
    }
    rustix::mount::mount_bind_recursive(source, target).map_err(rx(&format!("bind {source}")))?;
    let flags = MountFlags::BIND
        | MountFlags::RDONLY
        | MountFlags::NOSUID
        | MountFlags::NODEV
        | locked_flags(target)?;
    rustix::mount::mount_remount(target, flags, "")
        .map_err(rx(&format!("remount {target} read-only")))
}

const NEW_ROOT: &str = "/tmp";

fn build_root(spec: &SlotSpec) -> Result<()> {
    rustix::mount::mount_change("/", MountPropagationFlags::PRIVATE | MountPropagationFlags::REC)
        .map_err(rx("make / private"))?;
    tmpfs(NEW_ROOT, 1, "0755", MountFlags::NOSUID | MountFlags::NODEV)?;
    let at = |p: &str| format!("{NEW_ROOT}{p}");
    for dir in ["/proc", "/dev", "/work", "/tmp", "/etc", "/.old"] {
        mkdir(&at(dir), 0o755)?;
    }
    for source in &spec.ro_binds {
        bind_ro(source, &at(source))?;
    }
    for (link, target) in &spec.symlinks {
        std::os::unix::fs::symlink(target, at(link)).map_err(|e| format!("symlink {link}: {e}"))?;
    }
    let uid = spec.inner_uid;
    fs::write(
        at("/etc/passwd"),
        format!("root:x:0:0:root:/:/bin/false\nsandbox:x:{uid}:{uid}:sandbox:/work:/bin/sh\n"),
    )
    .map_err(os("write /etc/passwd"))?;
    fs::write(at("/etc/group"), format!("root:x:0:\nsandbox:x:{uid}:\n"))
        .map_err(os("write /etc/group"))?;

    // /dev: a small tmpfs with the harmless host devices bound in.
    tmpfs(&at("/dev"), 1, "0755", MountFlags::NOSUID | MountFlags::NOEXEC)?;
    for dev in ["null", "zero", "full", "random", "urandom"] {
        let target = at(&format!("/dev/{dev}"));
        fs::write(&target, b"").map_err(|e| format!("create {target}: {e}"))?;
        rustix::mount::mount_bind(format!("/dev/{dev}"), &target)
            .map_err(rx(&format!("bind /dev/{dev}")))?;
    }
    for (link, target) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        std::os::unix::fs::symlink(target, at(&format!("/dev/{link}")))
            .map_err(|e| format!("symlink /dev/{link}: {e}"))?;
    }
    mkdir(&at("/dev/shm"), 0o1777)?;
    tmpfs(&at("/dev/shm"), spec.tmp_mb, "1777", MountFlags::NOSUID | MountFlags::NODEV)?;

    rustix::mount::mount(
        "proc",
        at("/proc"),
        "proc",
        MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC,
        None,
    )
    .map_err(rx("mount /proc"))?;
    tmpfs(&at("/work"), spec.work_mb, "0755", MountFlags::NOSUID | MountFlags::NODEV)?;
    tmpfs(&at("/tmp"), spec.tmp_mb, "1777", MountFlags::NOSUID | MountFlags::NODEV)?;
    let inner = Some(rustix::fs::Uid::from_raw(uid));
    rustix::fs::chown(at("/work"), inner, Some(rustix::fs::Gid::from_raw(uid)))
        .map_err(rx("chown /work"))?;

    rustix::process::pivot_root(NEW_ROOT, at("/.old")).map_err(rx("pivot_root"))?;
    rustix::process::chdir("/").map_err(rx("chdir /"))?;
    rustix::mount::unmount("/.old", UnmountFlags::DETACH).map_err(rx("detach the old root"))?;
    fs::remove_dir("/.old").map_err(os("rmdir /.old"))?;
    rustix::mount::mount_remount(
        "/",
        MountFlags::BIND | MountFlags::RDONLY | MountFlags::NOSUID | MountFlags::NODEV,
        "",
    )
    .map_err(rx("remount / read-only"))?;
    rustix::system::sethostname(b"sandbox").map_err(rx("sethostname"))?;
    Ok(())
}

/// How long `kill_all` waits for killed processes to go when it must spare one.
const KILL_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Kills every process of the namespace but init (and the kept long-lived program, when it is
/// still alive), and reaps them; `false` if some were still there after `KILL_WAIT`.
fn kill_all(keep: &mut Option<i32>) -> bool {
    let Some(kept) = *keep else {
        // SAFETY: kill(-1) from PID 1 of a PID namespace reaches only that namespace.
        unsafe { libc::kill(-1, libc::SIGKILL) };
        loop {
            // SAFETY: reaps this process's children.
            let r = unsafe { libc::waitpid(-1, std::ptr::null_mut(), 0) };
            if r < 0 {
                break;
            }
        }
        return true;
    };
    // Everything but init and the kept program, until only they are left (bounded).
    let deadline = std::time::Instant::now() + KILL_WAIT;
    let mut all_gone = false;
    while std::time::Instant::now() < deadline {
        let mut others = 0;
        if let Ok(entries) = fs::read_dir("/proc") {
            for pid in entries.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok()) {
                if pid != 1 && pid != kept {
                    others += 1;
                    // SAFETY: signals a process of this namespace.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                }
            }
        }
        loop {
            // SAFETY: reaps whatever of this process's children has ended.
            let r = unsafe { libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) };
            if r <= 0 {
                break;
            }
            if r == kept {
                *keep = None;
            }
        }
        if others == 0 {
            all_gone = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
    // The kept program may itself have been killed by a run.
    // SAFETY: signal 0 only checks that the process exists.
    if unsafe { libc::kill(kept, 0) } != 0 {
        *keep = None;
    }
    all_gone
}

fn children_usage() -> libc::rusage {
    // SAFETY: getrusage fills the struct we pass.
    unsafe {
        let mut usage = std::mem::zeroed::<libc::rusage>();
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage);
        usage
    }
}

fn cpu_ms(u: &libc::rusage) -> f64 {
    let t = |tv: libc::timeval| tv.tv_sec as f64 * 1e3 + tv.tv_usec as f64 / 1e3;
    t(u.ru_utime) + t(u.ru_stime)
}

/// The filter for an exec: `filters` is [own IPC namespace, shared IPC namespace].
fn filter_for<'a>(filters: &'a [BpfProgram; 2], exec: &Exec) -> &'a BpfProgram {
    &filters[usize::from(exec.deny_ipc)]
}

/// A child forked ahead of the next exec, already under the seccomp filter of programs in their
/// own IPC namespace; it waits on `sock` for the exec and its descriptors.
struct Spare {
    pid: i32,
    sock: OwnedFd,
}

/// What a spare sends once it runs under the filter.
const SPARE_READY: &str = "ready";

impl Spare {
    /// Waits for the spare to be ready (it usually is long before the exec comes); `None`, with
    /// the spare ended and reaped, if it failed to get there.
    fn ready(self) -> Option<Self> {
        if let Ok(Some((word, _))) = chan::recv::<String>(self.sock.as_fd())
            && word == SPARE_READY
        {
            return Some(self);
        }
        self.end();
        None
    }

    /// Kills and reaps the spare.
    fn end(self) {
        // SAFETY: signals and reaps our own child, which nothing else reaps.
        unsafe {
            libc::kill(self.pid, libc::SIGKILL);
            libc::waitpid(self.pid, std::ptr::null_mut(), 0);
        }
    }
}

/// Forks a spare; `None` if that fails (the next exec then forks as usual).
fn fork_spare(spec: &SlotSpec, filter: &BpfProgram) -> Option<Spare> {
    let (ours, theirs) = rustix::net::socketpair(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )
    .ok()?;
    // SAFETY: init is single-threaded.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        drop(ours);
        spare_main(spec, filter, &theirs);
    }
    (pid > 0).then_some(Spare { pid, sock: ours })
}

/// The spare: filter first, then wait for the exec (with stdin, stdout, stderr and the error
/// pipe) and run it as any exec child does.
fn spare_main(spec: &SlotSpec, filter: &BpfProgram, sock: &OwnedFd) -> ! {
    let code = (|| -> Result<i32> {
        rustix::process::set_parent_process_death_signal(Some(Signal::KILL))
            .map_err(rx("pdeathsig"))?;
        rustix::thread::set_no_new_privs(true).map_err(rx("no_new_privs"))?;
        seccompiler::apply_filter(filter).map_err(|e| format!("seccomp: {e}"))?;
        // Ready: init hands an exec only to a spare that said so.
        chan::send(sock.as_fd(), &SPARE_READY, &[]).map_err(os("send"))?;
        let Some((exec, mut fds)) = chan::recv::<Exec>(sock.as_fd()).map_err(os("recv"))? else {
            return Ok(0);
        };
        if fds.len() != 4 {
            return Ok(125);
        }
        let err = fds.pop().expect("four descriptors");
        let message = exec_child(spec, None, &exec, &fds).unwrap_err();
        let _ = (&fs::File::from(err)).write_all(message.as_bytes());
        Ok(127)
    })();
    // SAFETY: leave without running the parent image's destructors.
    unsafe { libc::_exit(code.unwrap_or(126)) }
}

fn serve(sock: &OwnedFd, spec: &SlotSpec, filters: &[BpfProgram; 2]) {
    // The long-lived program (pre-imported Python), spared by kills and resets.
    let mut keep: Option<i32> = None;
    // Ended before anything that kills processes.
    let mut spare = fork_spare(spec, &filters[0]);
    loop {
        let Ok(Some((msg, fds))) = chan::recv::<ToSlot>(sock.as_fd()) else { break };
        let mut warm_next = false;
        let reply = match msg {
            ToSlot::Exec(exec) => {
                warm_next = exec.warm_next;
                let handed = if exec.deny_ipc { None } else { spare.take() };
                if let Some(unused) = spare.take() {
                    unused.end();
                }
                run_exec(sock, spec, filter_for(filters, &exec), handed, &exec, fds, &mut keep)
            }
            ToSlot::Spawn(exec) => {
                let result = spawn(spec, filter_for(filters, &exec), &exec, fds);
                if let Ok(pid) = result {
                    keep = Some(pid);
                }
                FromSlot::Spawned { result }
            }
            ToSlot::Kill => {
                if let Some(spare) = spare.take() {
                    spare.end();
                }
                kill_all(&mut keep);
                continue;
            }
            ToSlot::Sweep => {
                if let Some(spare) = spare.take() {
                    spare.end();
                }
                FromSlot::Swept { all_gone: kill_all(&mut keep) }
            }
            ToSlot::Reset => {
                if let Some(spare) = spare.take() {
                    spare.end();
                }
                let error = reset(spec, &mut keep).err();
                warm_next = error.is_none();
                FromSlot::ResetDone { error }
            }
            ToSlot::WriteFile { path, size, mode } => {
                file_reply(write_file(&path, size, mode, fds))
            }
            ToSlot::ReadFile { path, max } => file_reply(read_file(&path, max, fds)),
            ToSlot::MapsDone => continue,
        };
        if chan::send(sock.as_fd(), &reply, &[]).is_err() {
            break;
        }
        if warm_next && spare.is_none() {
            spare = fork_spare(spec, &filters[0]);
        }
    }
    if let Some(spare) = spare {
        spare.end();
    }
    keep = None;
    kill_all(&mut keep);
}

/// Starts a long-lived program without waiting for it.
fn spawn(
    spec: &SlotSpec,
    filter: &BpfProgram,
    exec: &Exec,
    fds: Vec<OwnedFd>,
) -> std::result::Result<i32, String> {
    if fds.len() != 3 || exec.argv.is_empty() {
        return Err("a spawn needs a program and three descriptors".into());
    }
    let (err_r, err_w) =
        rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(|e| e.to_string())?;
    // SAFETY: init is single-threaded.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // Its own IPC namespace: the long-lived program outlives resets, which renew init's, so
        // it must not share one with the ordinary programs of this or a later run.
        // SAFETY: unshare affects only this child, still root of the user namespace.
        let message = check("unshare(ipc)", unsafe { libc::unshare(libc::CLONE_NEWIPC) })
            .and_then(|()| exec_child(spec, Some(filter), exec, &fds).map(|never| match never {}))
            .unwrap_err();
        let _ = (&fs::File::from(err_w)).write_all(message.as_bytes());
        // SAFETY: leave without running the parent image's destructors.
        unsafe { libc::_exit(127) };
    }
    drop(err_w);
    drop(fds);
    if pid < 0 {
        return Err(format!("fork: {}", io::Error::last_os_error()));
    }
    let mut error = String::new();
    let _ = fs::File::from(err_r).read_to_string(&mut error);
    if error.is_empty() { Ok(pid) } else { Err(error) }
}

/// A fresh start inside the same namespaces: no process left, empty writable filesystems, a new
/// IPC namespace (System V objects and POSIX message queues do not outlive a run).
fn reset(spec: &SlotSpec, keep: &mut Option<i32>) -> Result<()> {
    if !kill_all(keep) {
        return Err(format!("processes were still alive {} s after the kill", KILL_WAIT.as_secs()));
    }
    for (dir, size, mode) in [
        ("/work", spec.work_mb, "0755"),
        ("/tmp", spec.tmp_mb, "1777"),
        ("/dev/shm", spec.tmp_mb, "1777"),
    ] {
        rustix::mount::unmount(dir, UnmountFlags::DETACH).map_err(rx(&format!("unmount {dir}")))?;
        tmpfs(dir, size, mode, MountFlags::NOSUID | MountFlags::NODEV)?;
    }
    let inner = Some(rustix::fs::Uid::from_raw(spec.inner_uid));
    rustix::fs::chown("/work", inner, Some(rustix::fs::Gid::from_raw(spec.inner_uid)))
        .map_err(rx("chown /work"))?;
    // SAFETY: init is single-threaded; a new IPC namespace affects only it and later children.
    check("unshare(ipc)", unsafe { libc::unshare(libc::CLONE_NEWIPC) })
}

fn file_reply(r: Result<u64>) -> FromSlot {
    match r {
        Ok(size) => FromSlot::FileDone { error: None, size },
        Err(e) => FromSlot::FileDone { error: Some(e), size: 0 },
    }
}

/// Opens `path` under `/work`, refusing `..`, absolute paths and every symbolic link, so a
/// program cannot redirect init's file operations.
fn open_beneath(path: &str, flags: rustix::fs::OFlags, mode: u32) -> Result<OwnedFd> {
    let work = rustix::fs::open(
        "/work",
        rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .map_err(rx("open /work"))?;
    rustix::fs::openat2(
        &work,
        path,
        flags | rustix::fs::OFlags::CLOEXEC | rustix::fs::OFlags::NOFOLLOW,
        rustix::fs::Mode::from_raw_mode(mode),
        rustix::fs::ResolveFlags::BENEATH
            | rustix::fs::ResolveFlags::NO_SYMLINKS
            | rustix::fs::ResolveFlags::NO_MAGICLINKS,
    )
    .map_err(rx(&format!("open {path}")))
}

fn write_file(path: &str, size: u64, mode: u32, fds: Vec<OwnedFd>) -> Result<u64> {
    let pipe = fds.into_iter().next().ok_or("no data descriptor")?;
    if let Some(parent) = Path::new(path).parent().filter(|p| !p.as_os_str().is_empty()) {
        // Create parent folders one level at a time, each beneath /work.
        let mut so_far = std::path::PathBuf::new();
        for part in parent.components() {
            so_far.push(part);
            let p = so_far.to_string_lossy().into_owned();
            if open_beneath(&p, rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::RDONLY, 0)
                .is_err()
            {
                let work = rustix::fs::open(
                    "/work",
                    rustix::fs::OFlags::DIRECTORY,
                    rustix::fs::Mode::empty(),
                )
                .map_err(rx("open /work"))?;
                rustix::fs::mkdirat(&work, &so_far, rustix::fs::Mode::from_raw_mode(0o755))
                    .map_err(rx(&format!("mkdir {p}")))?;
                let dir = open_beneath(
                    &p,
                    rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::RDONLY,
                    0,
                )?;
                let uid = Some(rustix::fs::Uid::from_raw(1000));
                let _ = rustix::fs::fchown(&dir, uid, Some(rustix::fs::Gid::from_raw(1000)));
            }
        }
    }
    let file = open_beneath(
        path,
        rustix::fs::OFlags::WRONLY | rustix::fs::OFlags::CREATE | rustix::fs::OFlags::TRUNC,
        mode & 0o777,
    )?;
    let mut out = fs::File::from(file);
    let copied = io::copy(&mut fs::File::from(pipe).take(size), &mut out).map_err(os("write"))?;
    if copied != size {
        return Err(format!("{path}: got {copied} of {size} bytes"));
    }
    out.set_permissions(fs::Permissions::from_mode(mode & 0o777)).map_err(os("chmod"))?;
    let uid = Some(rustix::fs::Uid::from_raw(1000));
    rustix::fs::fchown(&out, uid, Some(rustix::fs::Gid::from_raw(1000))).map_err(rx("chown"))?;
    Ok(copied)
}

fn read_file(path: &str, max: u64, fds: Vec<OwnedFd>) -> Result<u64> {
    let pipe = fds.into_iter().next().ok_or("no data descriptor")?;
    let file = open_beneath(path, rustix::fs::OFlags::RDONLY, 0)?;
    let st = rustix::fs::fstat(&file).map_err(rx("fstat"))?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
        return Err(format!("{path} is not a regular file"));
    }
    if st.st_size as u64 > max {
        return Err(format!("{path} is {} bytes, over the limit of {max}", st.st_size));
    }
    let mut out = fs::File::from(pipe);
    io::copy(&mut fs::File::from(file).take(max), &mut out).map_err(os("read"))
}

/// Runs one exec to its end and reports it.
fn run_exec(
    sock: &OwnedFd,
    spec: &SlotSpec,
    filter: &BpfProgram,
    spare: Option<Spare>,
    exec: &Exec,
    fds: Vec<OwnedFd>,
    keep: &mut Option<i32>,
) -> FromSlot {
    let exited = |code, signal, cpu, rss, spawn_error| FromSlot::Exited {
        code,
        signal,
        cpu_ms: cpu,
        max_rss_kb: rss,
        spawn_error,
    };
    let pipe = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC);
    let (Ok((err_r, err_w)), true) = (pipe, fds.len() == 3 && !exec.argv.is_empty()) else {
        if let Some(spare) = spare {
            spare.end();
        }
        let why = if fds.len() == 3 && !exec.argv.is_empty() {
            "pipe failed"
        } else {
            "an exec needs a program and three descriptors"
        };
        return exited(None, None, 0.0, 0, Some(why.into()));
    };
    let before = children_usage();
    let handed = spare.and_then(Spare::ready).and_then(|spare| {
        let with = [fds[0].as_fd(), fds[1].as_fd(), fds[2].as_fd(), err_w.as_fd()];
        if chan::send(spare.sock.as_fd(), exec, &with).is_ok() {
            return Some(spare.pid);
        }
        // The spare is gone (or broken): end it and fork as usual.
        spare.end();
        None
    });
    let pid = match handed {
        Some(pid) => pid,
        None => {
            // SAFETY: init is single-threaded.
            let pid = unsafe { libc::fork() };
            if pid == 0 {
                let message = exec_child(spec, Some(filter), exec, &fds).unwrap_err();
                let _ = (&fs::File::from(err_w)).write_all(message.as_bytes());
                // SAFETY: leave without running destructors or atexit handlers of the parent
                // image.
                unsafe { libc::_exit(127) };
            }
            pid
        }
    };
    drop(err_w);
    drop(fds);
    if pid < 0 {
        return exited(None, None, 0.0, 0, Some(format!("fork: {}", io::Error::last_os_error())));
    }
    let mut spawn_error = String::new();
    let _ = fs::File::from(err_r).read_to_string(&mut spawn_error);
    let status = wait_child(sock, pid, *keep);
    kill_all(keep);
    let after = children_usage();
    let cpu = cpu_ms(&after) - cpu_ms(&before);
    let (code, signal) = match status {
        Some(s) if libc::WIFEXITED(s) => (Some(libc::WEXITSTATUS(s)), None),
        Some(s) if libc::WIFSIGNALED(s) => (None, Some(libc::WTERMSIG(s))),
        _ => (None, None),
    };
    let spawn_error = (!spawn_error.is_empty()).then_some(spawn_error);
    exited(code, signal, cpu.max(0.0), after.ru_maxrss.max(0) as u64, spawn_error)
}

/// Waits for `pid`, answering `Kill` requests meanwhile; `None` if it could not be waited for.
fn wait_child(sock: &OwnedFd, pid: i32, keep: Option<i32>) -> Option<i32> {
    let raw = Pid::from_raw(pid)?;
    let pidfd = rustix::process::pidfd_open(raw, PidfdFlags::empty()).ok();
    let mut sock_open = true;
    if let Some(pidfd) = &pidfd {
        loop {
            let mut polls = vec![PollFd::new(pidfd, PollFlags::IN)];
            if sock_open {
                polls.push(PollFd::new(sock, PollFlags::IN));
            }
            if rustix::event::poll(&mut polls, None).is_err() {
                continue;
            }
            let child_done = !polls[0].revents().is_empty();
            let request = sock_open && polls.get(1).is_some_and(|p| !p.revents().is_empty());
            if request {
                match chan::recv::<ToSlot>(sock.as_fd()) {
                    Ok(Some((ToSlot::Kill, _))) => kill_without_reaping(keep),
                    Ok(Some(_)) => {}
                    _ => {
                        sock_open = false;
                        kill_without_reaping(keep);
                    }
                }
            }
            if child_done {
                break;
            }
        }
    }
    let mut status = 0;
    // SAFETY: waits for our own child.
    let r = unsafe { libc::waitpid(pid, &mut status, 0) };
    (r == pid).then_some(status)
}

/// Kills everything but init and the kept program, without reaping, so the child's status
/// stays readable.
fn kill_without_reaping(keep: Option<i32>) {
    match keep {
        // SAFETY: as in kill_all.
        None => unsafe {
            libc::kill(-1, libc::SIGKILL);
        },
        Some(kept) => {
            if let Ok(entries) = fs::read_dir("/proc") {
                for pid in entries.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
                {
                    if pid != 1 && pid != kept {
                        // SAFETY: signals a process of this namespace.
                        unsafe { libc::kill(pid, libc::SIGKILL) };
                    }
                }
            }
        }
    }
}

fn c_strings(items: &[String]) -> Result<Vec<CString>> {
    items
        .iter()
        .map(|s| CString::new(s.as_bytes()).map_err(|_| format!("NUL byte in `{s}`")))
        .collect()
}

/// In the forked child: descriptors, limits, credentials, seccomp, exec. Returns only on error.
/// Becomes the program: `filter` is installed first unless the caller (a spare) already runs
/// under it.
fn exec_child(
    spec: &SlotSpec,
    filter: Option<&BpfProgram>,
    exec: &Exec,
    fds: &[OwnedFd],
) -> Result<std::convert::Infallible> {
    if let Some(filter) = filter {
        rustix::thread::set_no_new_privs(true).map_err(rx("no_new_privs"))?;
        seccompiler::apply_filter(filter).map_err(|e| format!("seccomp: {e}"))?;
    }
    rustix::stdio::dup2_stdin(&fds[0]).map_err(rx("dup2 stdin"))?;
    rustix::stdio::dup2_stdout(&fds[1]).map_err(rx("dup2 stdout"))?;
    rustix::stdio::dup2_stderr(&fds[2]).map_err(rx("dup2 stderr"))?;
    // Every other descriptor closes at exec (the error pipe must live until then).
    // SAFETY: close_range only changes flags of this process's descriptors.
    check("close_range", unsafe {
        libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, libc::CLOSE_RANGE_CLOEXEC)
    } as i32)?;
    rustix::process::setsid().map_err(rx("setsid"))?;
    rustix::process::chdir(exec.cwd.as_str()).map_err(rx("chdir"))?;
    let limit = |resource, soft: u64, hard: u64| {
        rustix::process::setrlimit(
            resource,
            rustix::process::Rlimit { current: Some(soft), maximum: Some(hard) },
        )
        .map_err(rx("setrlimit"))
    };
    // 1, not 0: the kernel ignores a limit of 0 for a `|program` core_pattern (the core is
    // piped to the handler anyway) but treats 1 as "no core dump" for pipes and files alike.
    limit(rustix::process::Resource::Core, 1, 1)?;
    limit(rustix::process::Resource::Cpu, exec.cpu_s, exec.cpu_s + 1)?;
    limit(rustix::process::Resource::Nofile, exec.nofile, exec.nofile)?;
    limit(rustix::process::Resource::Fsize, exec.fsize, exec.fsize)?;
    // The program, not init, is what the OOM killer should take.
    fs::write("/proc/self/oom_score_adj", b"1000").map_err(os("oom_score_adj"))?;
    let uid = spec.inner_uid;
    // Supplementary groups were cleared before the user namespace (where setgroups is denied).
    let gid = rustix::process::Gid::from_raw(uid);
    rustix::thread::set_thread_res_gid(gid, gid, gid).map_err(rx("setresgid"))?;
    let uid = rustix::process::Uid::from_raw(uid);
    // From uid 0 to a non-zero uid: the kernel clears every capability set.
    rustix::thread::set_thread_res_uid(uid, uid, uid).map_err(rx("setresuid"))?;
    // The death signal is cleared by the credential change, so it is set after it.
    rustix::process::set_parent_process_death_signal(Some(Signal::KILL))
        .map_err(rx("pdeathsig"))?;
    let argv = c_strings(&exec.argv)?;
    let env = c_strings(&exec.env)?;
    let mut argv_p: Vec<*const libc::c_char> = argv.iter().map(|s| s.as_ptr()).collect();
    argv_p.push(std::ptr::null());
    let mut env_p: Vec<*const libc::c_char> = env.iter().map(|s| s.as_ptr()).collect();
    env_p.push(std::ptr::null());
    // SAFETY: both arrays are NUL-terminated and outlive the call; execve returns only on error.
    unsafe { libc::execve(argv[0].as_ptr(), argv_p.as_ptr(), env_p.as_ptr()) };
    Err(format!("cannot execute {}: {}", exec.argv[0], io::Error::last_os_error()))
}
