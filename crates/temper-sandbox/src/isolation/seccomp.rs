//! The seccomp-bpf filter installed on every sandboxed program just before `execve`.
//!
//! One program decides, in order:
//! 1. anything but the x86_64 architecture kills the process, and the x32 ABI is refused (a
//!    filter keyed on syscall numbers would let x32's aliases through);
//! 2. `clone3` is answered with `ENOSYS`, so libc falls back to `clone`, whose flags the filter can
//!    inspect (a `clone3` argument is a pointer a filter cannot read); `clone` with any
//!    namespace flag is refused;
//! 3. a deny list is answered with `EPERM`: mounting, namespaces, tracing other processes, kernel
//!    keyrings, io_uring, BPF, perf events, userfaultfd, module loading, time and host changes,
//!    and (for programs that share an IPC namespace across runs) System V IPC;
//! 4. `socket` and `socketpair` are allowed only for the families programs need, `AF_UNIX`,
//!    `AF_INET` and `AF_INET6` (anything else, such as `AF_VSOCK`, which a network namespace
//!    does not cover, netlink or `AF_PACKET`, is `EAFNOSUPPORT`), and never for raw or packet
//!    sockets (`SOCK_RAW`, `SOCK_PACKET`: `EPERM`).
//!
//! The syscall number is found by a binary search rather than `seccompiler`'s linear chain of
//! comparisons. The cost matters because a filter is attached before every exec, and attaching
//! one makes the kernel run it for every syscall number (to build its cache of always-allowed
//! calls): the linear chains, four stacked programs of 416 instructions, cost about 340 µs per
//! exec on the project machine, a good part of a run's whole overhead. The tests check this
//! program against the same rules compiled by `seccompiler`, on every syscall number.

use seccompiler::{BpfProgram, sock_filter};

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

/// System V IPC and POSIX message queues, every call: refused for programs that share an IPC
/// namespace across runs.
const IPC: &[libc::c_long] = &[
    libc::SYS_shmget,
    libc::SYS_shmat,
    libc::SYS_shmdt,
    libc::SYS_shmctl,
    libc::SYS_semget,
    libc::SYS_semop,
    libc::SYS_semtimedop,
    libc::SYS_semctl,
    libc::SYS_msgget,
    libc::SYS_msgsnd,
    libc::SYS_msgrcv,
    libc::SYS_msgctl,
    libc::SYS_mq_open,
    libc::SYS_mq_unlink,
    libc::SYS_mq_timedsend,
    libc::SYS_mq_timedreceive,
    libc::SYS_mq_notify,
    libc::SYS_mq_getsetattr,
];

/// `clone` flags that create namespaces.
const NAMESPACE_FLAGS: &[u64] = &[
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWCGROUP as u64,
    libc::CLONE_NEWUTS as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWPID as u64,
    libc::CLONE_NEWNET as u64,
    // CLONE_NEWTIME (0x80) exists only for unshare and clone3, both refused; in clone's flags
    // that bit belongs to the exit signal.
];

/// Socket families a program may open.
const FAMILIES: &[u32] = &[libc::AF_UNIX as u32, libc::AF_INET as u32, libc::AF_INET6 as u32];

/// The obsolete `SOCK_PACKET` type (10), a packet socket by another name; libc deprecates the
/// constant, the kernel still accepts it.
const SOCK_PACKET: u32 = 10;

/// Socket types refused in every family.
const RAW_TYPES: &[u32] = &[libc::SOCK_RAW as u32, SOCK_PACKET];

/// The bits of `socket`'s type argument that name the type (the rest are `SOCK_NONBLOCK` and
/// `SOCK_CLOEXEC`): the kernel's `SOCK_TYPE_MASK`.
const SOCK_TYPE_MASK: u32 = 0xf;

/// Classic BPF opcodes used here.
const LD_W_ABS: u16 = 0x20;
const JEQ_K: u16 = 0x15;
const JGE_K: u16 = 0x35;
const JSET_K: u16 = 0x45;
const JA: u16 = 0x05;
const RET_K: u16 = 0x06;
const AND_K: u16 = 0x54;

/// Offsets in `struct seccomp_data`.
const NR: u32 = 0;
const ARCH: u32 = 4;
/// The low 32 bits of the first argument (x86_64 is little-endian). `clone` reads only those
/// bits of its flags.
const ARG0_LOW: u32 = 16;
/// The low 32 bits of the second argument (`socket`'s type, an `int`).
const ARG1_LOW: u32 = 24;

/// Where a jump goes: the next instruction, or a label placed later.
#[derive(Clone, Copy)]
enum To {
    Next,
    Label(usize),
}

/// A tiny assembler with forward labels; offsets are checked to fit BPF's 8-bit jumps.
struct Asm {
    code: Vec<(u16, u32, To, To)>,
    labels: Vec<Option<usize>>,
}

impl Asm {
    fn label(&mut self) -> usize {
        self.labels.push(None);
        self.labels.len() - 1
    }

    fn bind(&mut self, label: usize) {
        self.labels[label] = Some(self.code.len());
    }

    fn op(&mut self, code: u16, k: u32) {
        self.code.push((code, k, To::Next, To::Next));
    }

    fn jump(&mut self, code: u16, k: u32, jt: To, jf: To) {
        self.code.push((code, k, jt, jf));
    }

    fn finish(self) -> Result<BpfProgram, String> {
        let offset = |pc: usize, to: To| -> Result<usize, String> {
            match to {
                To::Next => Ok(0),
                To::Label(l) => {
                    let target =
                        self.labels[l].ok_or("seccomp filter: a label was never placed")?;
                    target
                        .checked_sub(pc + 1)
                        .ok_or_else(|| "seccomp filter: a jump goes backwards".to_owned())
                }
            }
        };
        let mut out = Vec::with_capacity(self.code.len());
        for (pc, &(code, k, jt, jf)) in self.code.iter().enumerate() {
            if code == JA {
                let k = u32::try_from(offset(pc, jt)?).map_err(|e| e.to_string())?;
                out.push(sock_filter { code, jt: 0, jf: 0, k });
                continue;
            }
            let short = |o: usize| {
                u8::try_from(o).map_err(|_| format!("seccomp filter: a jump of {o} is too long"))
            };
            out.push(sock_filter {
                code,
                jt: short(offset(pc, jt)?)?,
                jf: short(offset(pc, jf)?)?,
                k,
            });
        }
        Ok(out)
    }
}

/// Emits a binary search over `keys` (sorted by syscall number): each key jumps to its label, any
/// other number to `other`.
fn search(asm: &mut Asm, keys: &[(u32, usize)], other: usize) {
    if keys.len() <= 4 {
        for &(nr, action) in keys {
            asm.jump(JEQ_K, nr, To::Label(action), To::Next);
        }
        asm.jump(JA, 0, To::Label(other), To::Next);
        return;
    }
    let mid = keys.len() / 2;
    let upper = asm.label();
    asm.jump(JGE_K, keys[mid].0, To::Label(upper), To::Next);
    search(asm, &keys[..mid], other);
    asm.bind(upper);
    search(asm, &keys[mid..], other);
}

/// The filter for one exec; `deny_ipc` adds System V IPC and POSIX message queues to the deny
/// list (for programs that share an IPC namespace across runs).
pub fn program(deny_ipc: bool) -> Result<BpfProgram, String> {
    let mut asm = Asm { code: Vec::new(), labels: Vec::new() };
    let (allow, eperm, enosys, clone) = (asm.label(), asm.label(), asm.label(), asm.label());
    let (socket, eafnosupport) = (asm.label(), asm.label());
    let nr = |n: libc::c_long| u32::try_from(n).map_err(|e| e.to_string());
    let mut keys = vec![
        (nr(libc::SYS_clone3)?, enosys),
        (nr(libc::SYS_clone)?, clone),
        (nr(libc::SYS_socket)?, socket),
        (nr(libc::SYS_socketpair)?, socket),
    ];
    for &n in DENIED.iter().chain(if deny_ipc { IPC } else { &[] }) {
        keys.push((nr(n)?, eperm));
    }
    keys.sort_unstable();
    if keys.windows(2).any(|w| w[0].0 == w[1].0) {
        return Err("seccomp filter: a syscall is listed twice".into());
    }

    asm.op(LD_W_ABS, ARCH);
    let native = asm.label();
    asm.jump(JEQ_K, AUDIT_ARCH_X86_64, To::Label(native), To::Next);
    asm.op(RET_K, RET_KILL_PROCESS);
    asm.bind(native);
    asm.op(LD_W_ABS, NR);
    asm.jump(JSET_K, X32_SYSCALL_BIT, To::Label(eperm), To::Next);
    search(&mut asm, &keys, allow);

    asm.bind(clone);
    asm.op(LD_W_ABS, ARG0_LOW);
    let namespaces = NAMESPACE_FLAGS.iter().fold(0u64, |m, f| m | f);
    let namespaces = u32::try_from(namespaces).map_err(|e| e.to_string())?;
    asm.jump(JSET_K, namespaces, To::Label(eperm), To::Label(allow));

    // socket(domain, type, protocol) and socketpair(domain, type, protocol, sv): both `int`s.
    asm.bind(socket);
    asm.op(LD_W_ABS, ARG0_LOW);
    let family_ok = asm.label();
    for &family in FAMILIES {
        asm.jump(JEQ_K, family, To::Label(family_ok), To::Next);
    }
    asm.jump(JA, 0, To::Label(eafnosupport), To::Next);
    asm.bind(family_ok);
    asm.op(LD_W_ABS, ARG1_LOW);
    asm.op(AND_K, SOCK_TYPE_MASK);
    for &kind in RAW_TYPES {
        asm.jump(JEQ_K, kind, To::Label(eperm), To::Next);
    }
    asm.jump(JA, 0, To::Label(allow), To::Next);

    asm.bind(allow);
    asm.op(RET_K, RET_ALLOW);
    asm.bind(eperm);
    asm.op(RET_K, RET_ERRNO | libc::EPERM as u32);
    asm.bind(enosys);
    asm.op(RET_K, RET_ERRNO | libc::ENOSYS as u32);
    asm.bind(eafnosupport);
    asm.op(RET_K, RET_ERRNO | libc::EAFNOSUPPORT as u32);
    asm.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    use seccompiler::{
        SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
        SeccompRule, TargetArch,
    };

    const AUDIT_ARCH_I386: u32 = 0x4000_0003;

    /// Runs a classic BPF program on `seccomp_data`, as the kernel does (the subset of opcodes
    /// the filters use; anything else fails the test).
    fn eval(prog: &[sock_filter], nr: u32, arch: u32, args: [u64; 6]) -> u32 {
        let word = |k: u32| -> u32 {
            match k {
                0 => nr,
                4 => arch,
                8 | 12 => 0,
                k if (16..64).contains(&k) && k % 4 == 0 => {
                    let arg = args[(k as usize - 16) / 8];
                    if k % 8 == 0 { arg as u32 } else { (arg >> 32) as u32 }
                }
                k => panic!("load of offset {k}"),
            }
        };
        let (mut pc, mut a) = (0usize, 0u32);
        loop {
            let i = &prog[pc];
            pc += 1;
            let (k, jt, jf) = (i.k, i.jt as usize, i.jf as usize);
            let branch = |cond: bool| if cond { jt } else { jf };
            match i.code {
                0x20 => a = word(k),
                0x54 => a &= k,
                0x05 => pc += k as usize,
                0x15 => pc += branch(a == k),
                0x35 => pc += branch(a >= k),
                0x25 => pc += branch(a > k),
                0x45 => pc += branch(a & k != 0),
                0x06 => return k,
                c => panic!("opcode {c:#x}"),
            }
        }
    }

    /// The kernel's rule for stacked filters: the most severe action wins; among equals, the
    /// filter installed last.
    fn stacked(progs: &[BpfProgram], nr: u32, arch: u32, args: [u64; 6]) -> u32 {
        let rank = |r: u32| (r & 0xffff_0000) as i32;
        let mut best: Option<u32> = None;
        for prog in progs.iter().rev() {
            let r = eval(prog, nr, arch, args);
            if best.is_none_or(|b| rank(r) < rank(b)) {
                best = Some(r);
            }
        }
        best.expect("at least one filter")
    }

    fn compile(rules: BTreeMap<i64, Vec<SeccompRule>>, errno: i32) -> BpfProgram {
        let filter = SeccompFilter::new(
            rules,
            SeccompAction::Allow,
            SeccompAction::Errno(errno as u32),
            TargetArch::x86_64,
        )
        .expect("filter");
        BpfProgram::try_from(filter).expect("compile")
    }

    /// The same rules as `seccompiler` programs, stacked as the first version of the sandbox
    /// installed them: arch, clone3, [ipc], deny list.
    fn reference(deny_ipc: bool) -> Vec<BpfProgram> {
        let arch = vec![
            sock_filter { code: LD_W_ABS, jt: 0, jf: 0, k: ARCH },
            sock_filter { code: JEQ_K, jt: 1, jf: 0, k: AUDIT_ARCH_X86_64 },
            sock_filter { code: RET_K, jt: 0, jf: 0, k: RET_KILL_PROCESS },
            sock_filter { code: LD_W_ABS, jt: 0, jf: 0, k: NR },
            sock_filter { code: JSET_K, jt: 0, jf: 1, k: X32_SYSCALL_BIT },
            sock_filter { code: RET_K, jt: 0, jf: 0, k: RET_ERRNO | libc::EPERM as u32 },
            sock_filter { code: RET_K, jt: 0, jf: 0, k: RET_ALLOW },
        ];
        let clone3 = compile(BTreeMap::from([(libc::SYS_clone3, Vec::new())]), libc::ENOSYS);
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
                .expect("condition");
                SeccompRule::new(vec![cond]).expect("rule")
            })
            .collect();
        denied.insert(libc::SYS_clone, clone_rules);
        let dword = |op, value: u32, arg: u8| {
            SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, u64::from(value))
                .expect("condition")
        };
        // Raw and packet types, in any family (the family filter below wins for a bad family).
        let raw: Vec<SeccompRule> = RAW_TYPES
            .iter()
            .map(|&t| {
                let cond = dword(SeccompCmpOp::MaskedEq(u64::from(SOCK_TYPE_MASK)), t, 1);
                SeccompRule::new(vec![cond]).expect("rule")
            })
            .collect();
        // Any family but the allowed ones: every `!=` must hold.
        let family =
            SeccompRule::new(FAMILIES.iter().map(|&f| dword(SeccompCmpOp::Ne, f, 0)).collect())
                .expect("rule");
        let mut socket_types = BTreeMap::new();
        let mut families = BTreeMap::new();
        for call in [libc::SYS_socket, libc::SYS_socketpair] {
            socket_types.insert(call, raw.clone());
            families.insert(call, vec![family.clone()]);
        }
        let mut out = vec![arch, clone3];
        if deny_ipc {
            out.push(compile(IPC.iter().map(|&nr| (nr, Vec::new())).collect(), libc::EPERM));
        }
        out.push(compile(denied, libc::EPERM));
        out.push(compile(socket_types, libc::EPERM));
        out.push(compile(families, libc::EAFNOSUPPORT));
        out
    }

    #[test]
    fn the_search_tree_decides_as_the_seccompiler_rules_do() {
        let flag_cases: Vec<u64> = NAMESPACE_FLAGS
            .iter()
            .copied()
            .chain([
                0,
                libc::SIGCHLD as u64,
                (libc::CLONE_VM | libc::CLONE_FS | libc::CLONE_FILES | libc::CLONE_THREAD) as u64,
                (libc::CLONE_NEWNET | libc::CLONE_VM) as u64,
                0xffff_ffff_0000_0000,
                u64::MAX,
            ])
            .collect();
        for deny_ipc in [false, true] {
            let ours = program(deny_ipc).expect("program");
            assert!(ours.len() < 200, "{} instructions", ours.len());
            let theirs = reference(deny_ipc);
            let mut numbers: Vec<u32> = (0..1024).collect();
            numbers.extend([X32_SYSCALL_BIT, X32_SYSCALL_BIT | 165, X32_SYSCALL_BIT | 1, u32::MAX]);
            for nr in numbers {
                for arch in [AUDIT_ARCH_X86_64, AUDIT_ARCH_I386, 0] {
                    for &flags in &flag_cases {
                        let args = [flags, 0, 0, 0, 0, 0];
                        assert_eq!(
                            eval(&ours, nr, arch, args),
                            stacked(&theirs, nr, arch, args),
                            "nr {nr} arch {arch:#x} args {flags:#x} deny_ipc {deny_ipc}"
                        );
                    }
                }
            }
            // Socket calls over every family number and type the kernel knows, with flag bits
            // and high bits set too.
            for nr in [libc::SYS_socket as u32, libc::SYS_socketpair as u32] {
                for family in (0..48u64).chain([1 << 32 | 1, 1 << 32 | 40, u64::MAX]) {
                    for kind in (0..12u64).flat_map(|t| {
                        [
                            t,
                            t | libc::SOCK_NONBLOCK as u64,
                            t | libc::SOCK_CLOEXEC as u64,
                            t | 1 << 40,
                        ]
                    }) {
                        let args = [family, kind, 0, 0, 0, 0];
                        assert_eq!(
                            eval(&ours, nr, AUDIT_ARCH_X86_64, args),
                            stacked(&theirs, nr, AUDIT_ARCH_X86_64, args),
                            "nr {nr} family {family:#x} type {kind:#x}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn known_verdicts() {
        let p = program(true).expect("program");
        let run = |nr: libc::c_long, arg0: u64| {
            eval(&p, nr as u32, AUDIT_ARCH_X86_64, [arg0, 0, 0, 0, 0, 0])
        };
        let eperm = RET_ERRNO | libc::EPERM as u32;
        assert_eq!(run(libc::SYS_read, 0), RET_ALLOW);
        assert_eq!(run(libc::SYS_execve, 0), RET_ALLOW);
        assert_eq!(run(libc::SYS_mount, 0), eperm);
        assert_eq!(run(libc::SYS_seccomp, 0), eperm);
        assert_eq!(run(libc::SYS_shmget, 0), eperm);
        assert_eq!(run(libc::SYS_clone3, 0), RET_ERRNO | libc::ENOSYS as u32);
        assert_eq!(run(libc::SYS_clone, libc::SIGCHLD as u64), RET_ALLOW);
        assert_eq!(run(libc::SYS_clone, libc::CLONE_NEWUSER as u64), eperm);
        assert_eq!(eval(&p, 0, AUDIT_ARCH_I386, [0; 6]), RET_KILL_PROCESS);
        let socket = |family: i32, kind: i32| {
            let args = [family as u64, kind as u64, 0, 0, 0, 0];
            eval(&p, libc::SYS_socket as u32, AUDIT_ARCH_X86_64, args)
        };
        let eafnosupport = RET_ERRNO | libc::EAFNOSUPPORT as u32;
        assert_eq!(socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC), RET_ALLOW);
        assert_eq!(socket(libc::AF_INET6, libc::SOCK_DGRAM), RET_ALLOW);
        assert_eq!(socket(libc::AF_UNIX, libc::SOCK_SEQPACKET), RET_ALLOW);
        assert_eq!(socket(libc::AF_INET, libc::SOCK_RAW), eperm);
        assert_eq!(socket(libc::AF_INET6, libc::SOCK_RAW | libc::SOCK_NONBLOCK), eperm);
        assert_eq!(socket(libc::AF_INET, SOCK_PACKET as i32), eperm);
        for family in [libc::AF_VSOCK, libc::AF_NETLINK, libc::AF_PACKET, libc::AF_BLUETOOTH] {
            assert_eq!(socket(family, libc::SOCK_STREAM), eafnosupport, "family {family}");
        }
        let pair = [libc::AF_VSOCK as u64, libc::SOCK_STREAM as u64, 0, 0, 0, 0];
        assert_eq!(eval(&p, libc::SYS_socketpair as u32, AUDIT_ARCH_X86_64, pair), eafnosupport);
        let open = program(false).expect("program");
        assert_eq!(eval(&open, libc::SYS_shmget as u32, AUDIT_ARCH_X86_64, [0; 6]), RET_ALLOW);
    }
}
