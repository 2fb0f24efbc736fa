//! The seccomp-bpf filters installed on every sandboxed program just before `execve`.
//!
//! Three programs, stacked:
//! 1. architecture check (anything but x86_64 kills the process) and the x32 ABI refused, by
//!    hand, because a filter keyed on syscall numbers would let x32's aliases through;
//! 2. `clone3` answered with `ENOSYS`, so libc falls back to `clone`, whose flags filter 3 can
//!    inspect (a `clone3` argument is a pointer the filter cannot read);
//! 3. a deny list answered with `EPERM`: mounting, namespaces, tracing other processes, kernel
//!    keyrings, io_uring, BPF, perf events, userfaultfd, module loading, time and host changes.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch, sock_filter,
};

const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
const X32_SYSCALL_BIT: u32 = 0x4000_0000;
const RET_KILL_PROCESS: u32 = 0x8000_0000;
const RET_ERRNO: u32 = 0x0005_0000;
const RET_ALLOW: u32 = 0x7fff_0000;

/// Syscalls refused outright.
const DENIED: &[libc::c_long] = &[
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_chroot,
    libc::SYS_move_mount,
    libc::SYS_open_tree,
    libc::SYS_fsopen,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_mount_setattr,
    libc::SYS_unshare,
    libc::SYS_setns,
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_kcmp,
    libc::SYS_pidfd_getfd,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_userfaultfd,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_personality,
    libc::SYS_reboot,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_syslog,
    libc::SYS_acct,
    libc::SYS_settimeofday,
    libc::SYS_clock_settime,
    libc::SYS_clock_adjtime,
    libc::SYS_adjtimex,
    libc::SYS_sethostname,
    libc::SYS_setdomainname,
    libc::SYS_quotactl,
    libc::SYS_lookup_dcookie,
    libc::SYS_open_by_handle_at,
    libc::SYS_name_to_handle_at,
    libc::SYS_fanotify_init,
    libc::SYS_iopl,
    libc::SYS_ioperm,
    libc::SYS_vhangup,
    libc::SYS_mknod,
    libc::SYS_mknodat,
    libc::SYS_uselib,
    libc::SYS_ustat,
    libc::SYS_sysfs,
    libc::SYS_seccomp,
];

/// System V IPC and POSIX message queues: refused for programs that share an IPC namespace
/// across runs.
const IPC: &[libc::c_long] =
    &[libc::SYS_shmget, libc::SYS_shmat, libc::SYS_semget, libc::SYS_msgget, libc::SYS_mq_open];

/// `clone` flags that create namespaces.
const NAMESPACE_FLAGS: &[u64] = &[
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWCGROUP as u64,
    libc::CLONE_NEWUTS as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWPID as u64,
    libc::CLONE_NEWNET as u64,
    0x80, // CLONE_NEWTIME
];

fn stmt(code: u16, k: u32) -> sock_filter {
    sock_filter { code, jt: 0, jf: 0, k }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> sock_filter {
    sock_filter { code, jt, jf, k }
}

/// Filter 1: x86_64 only, no x32.
fn arch_filter() -> BpfProgram {
    const LD_W_ABS: u16 = 0x20;
    const JEQ_K: u16 = 0x15;
    const JSET_K: u16 = 0x45;
    const RET_K: u16 = 0x06;
    vec![
        stmt(LD_W_ABS, 4),                    // A = seccomp_data.arch
        jump(JEQ_K, AUDIT_ARCH_X86_64, 1, 0), // x86_64? skip the kill
        stmt(RET_K, RET_KILL_PROCESS),
        stmt(LD_W_ABS, 0),                   // A = seccomp_data.nr
        jump(JSET_K, X32_SYSCALL_BIT, 0, 1), // x32 bit set? refuse
        stmt(RET_K, RET_ERRNO | libc::EPERM as u32),
        stmt(RET_K, RET_ALLOW),
    ]
}

fn compile(rules: BTreeMap<i64, Vec<SeccompRule>>, errno: i32) -> Result<BpfProgram, String> {
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(errno as u32),
        TargetArch::x86_64,
    )
    .map_err(|e| format!("seccomp filter: {e}"))?;
    BpfProgram::try_from(filter).map_err(|e| format!("seccomp filter: {e}"))
}

/// The extra filter of programs with a shared IPC namespace.
pub fn ipc_filter() -> Result<BpfProgram, String> {
    compile(IPC.iter().map(|&nr| (nr, Vec::new())).collect(), libc::EPERM)
}

/// The three filters, compiled once per slot and installed in each program before `execve`.
pub fn filters() -> Result<Vec<BpfProgram>, String> {
    let clone3 = BTreeMap::from([(libc::SYS_clone3, Vec::new())]);
    let mut denied: BTreeMap<i64, Vec<SeccompRule>> =
        DENIED.iter().map(|&nr| (nr, Vec::new())).collect();
    let clone_rules = NAMESPACE_FLAGS
        .iter()
        .map(|&flag| {
            let cond = SeccompCondition::new(
                0,
                SeccompCmpArgLen::Qword,
                SeccompCmpOp::MaskedEq(flag),
                flag,
            )
            .map_err(|e| format!("seccomp condition: {e}"))?;
            SeccompRule::new(vec![cond]).map_err(|e| format!("seccomp rule: {e}"))
        })
        .collect::<Result<Vec<_>, String>>()?;
    denied.insert(libc::SYS_clone, clone_rules);
    Ok(vec![arch_filter(), compile(clone3, libc::ENOSYS)?, compile(denied, libc::EPERM)?])
}
