//! The sandbox's seccomp filter: system calls a build or a test never needs, refused.
//!
//! The agent installs it on itself before it starts serving (no other thread exists yet), so
//! every command inherits it and no command can remove it (`no_new_privs` is set with it).
//! Installing it in the agent rather than handing `bwrap --seccomp FD` a compiled program keeps
//! one code path for root and unprivileged servers.
//!
//! A deny-list, not an allow-list: compilers, package managers and test runners use a long and
//! moving tail of system calls, and an allow-list that misses one breaks real work in ways that
//! are hard to diagnose. What is refused, and why:
//! - kernel keyrings (`keyctl`, `add_key`, `request_key`): not namespaced; a hostile test added
//!   keys to host root's keyring;
//! - `ptrace`, `process_vm_readv/writev`: no command may inspect or write into the agent (which
//!   is also non-dumpable) or another command;
//! - `perf_event_open`, `bpf`, `userfaultfd`, `io_uring_*`: large kernel attack surface, the
//!   source of many privilege escalations, never needed by a build;
//! - new user namespaces (`unshare`, `setns`, `clone` with `CLONE_NEWUSER`; `clone3`, whose
//!   flags live in memory seccomp cannot read, answers `ENOSYS` so libc falls back to `clone`):
//!   a namespace would hand a command the capabilities the sandbox dropped;
//! - mount and system administration calls (`mount`, `umount2`, `pivot_root`, `swapon`,
//!   `reboot`, modules, `kexec_*`, clocks, `acct`, `quotactl`, `syslog`, …);
//! - setuid and setgid modes (`chmod`, `fchmod`, `fchmodat`, `fchmodat2`, and the mode of
//!   `open`/`openat`/`creat`/`mkdir`/`mkdirat`/`mknod`/`mknodat`): when the server is root the
//!   workspace reaches the sandbox through an idmapped mount, so a file made inside is owned by
//!   the workspace's host owner; a setuid bit on it would be a host privilege (`openat2`, whose
//!   mode is in memory, answers `ENOSYS`: libc does not depend on it);
//! - every `*setxattr` (`EOPNOTSUPP`, which `cp -a` and `tar` treat as "no extended
//!   attributes"): a `security.capability` attribute is a file capability, and seccomp cannot
//!   read the attribute's name to single it out.
//!
//! One allow-list among the refusals: the address families of `socket` and `socketpair`. A
//! command may make `AF_UNIX`, `AF_INET`, `AF_INET6` and `AF_NETLINK` sockets (the network
//! namespace confines the last three: its one way out is the proxy's socket); every other family
//! answers `EAFNOSUPPORT`, which programs take as "not on this system". Some families are not
//! namespaced at all — `AF_VSOCK` reaches the VM's host and binds the machine's vsock ports — and
//! new ones appear with kernels, so the families are listed by what is allowed, not refused.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

/// `S_ISUID | S_ISGID`.
const SETID_BITS: [u64; 2] = [0o4000, 0o2000];

/// `setxattrat(2)` (Linux 6.13; the same number on every architecture since 424), not yet in
/// `libc`.
const SYS_SETXATTRAT: i64 = 463;

/// `CLONE_NEWUSER`.
const CLONE_NEWUSER: u64 = 0x1000_0000;

/// Why the filter could not be built or installed.
#[derive(Debug, thiserror::Error)]
pub enum SeccompError {
    /// This architecture has no filter.
    #[error("no seccomp filter for this architecture ({0})")]
    Arch(&'static str),
    /// seccompiler refused the rules or the kernel the program.
    #[error("seccomp: {0}")]
    Filter(#[from] seccompiler::Error),
    /// Compiling the rules failed.
    #[error("seccomp: {0}")]
    Backend(#[from] seccompiler::BackendError),
}

fn arch() -> Result<TargetArch, SeccompError> {
    match std::env::consts::ARCH {
        "x86_64" => Ok(TargetArch::x86_64),
        "aarch64" => Ok(TargetArch::aarch64),
        "riscv64" => Ok(TargetArch::riscv64),
        other => Err(SeccompError::Arch(other)),
    }
}

/// Calls refused outright with `EPERM`.
fn always_refused() -> Vec<i64> {
    let mut calls = vec![
        libc::SYS_keyctl,
        libc::SYS_add_key,
        libc::SYS_request_key,
        libc::SYS_ptrace,
        libc::SYS_process_vm_readv,
        libc::SYS_process_vm_writev,
        libc::SYS_perf_event_open,
        libc::SYS_bpf,
        libc::SYS_userfaultfd,
        libc::SYS_unshare,
        libc::SYS_setns,
        libc::SYS_mount,
        libc::SYS_umount2,
        libc::SYS_pivot_root,
        libc::SYS_open_tree,
        libc::SYS_move_mount,
        libc::SYS_fsopen,
        libc::SYS_fsconfig,
        libc::SYS_fsmount,
        libc::SYS_fspick,
        libc::SYS_mount_setattr,
        libc::SYS_swapon,
        libc::SYS_swapoff,
        libc::SYS_reboot,
        libc::SYS_init_module,
        libc::SYS_finit_module,
        libc::SYS_delete_module,
        libc::SYS_kexec_load,
        libc::SYS_kexec_file_load,
        libc::SYS_acct,
        libc::SYS_quotactl,
        libc::SYS_syslog,
        libc::SYS_settimeofday,
        libc::SYS_clock_settime,
        libc::SYS_clock_adjtime,
        libc::SYS_adjtimex,
        libc::SYS_open_by_handle_at,
        libc::SYS_name_to_handle_at,
        libc::SYS_personality,
        libc::SYS_vhangup,
        libc::SYS_lookup_dcookie,
        libc::SYS_fanotify_init,
    ];
    #[cfg(target_arch = "x86_64")]
    calls.extend([libc::SYS_iopl, libc::SYS_ioperm, libc::SYS_uselib]);
    calls
}

/// Calls that answer `ENOSYS`, so libc and runtimes fall back to an older call we can check.
fn unsupported() -> Vec<i64> {
    vec![
        libc::SYS_clone3,
        libc::SYS_openat2,
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
    ]
}

/// Address families a command may open sockets of (see the module header).
const SOCKET_FAMILIES: [u64; 4] =
    [libc::AF_UNIX as u64, libc::AF_INET as u64, libc::AF_INET6 as u64, libc::AF_NETLINK as u64];

/// `socket` and `socketpair` of any other family answer `EAFNOSUPPORT`: one rule per call whose
/// conditions (all must hold) say the family is none of the allowed ones.
fn other_families() -> Result<BTreeMap<i64, Vec<SeccompRule>>, SeccompError> {
    let none_allowed = || -> Result<SeccompRule, SeccompError> {
        let conds = SOCKET_FAMILIES
            .iter()
            .map(|&family| {
                SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Ne, family)
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(SeccompRule::new(conds)?)
    };
    [libc::SYS_socket, libc::SYS_socketpair]
        .into_iter()
        .map(|call| Ok((call, vec![none_allowed()?])))
        .collect()
}

/// Calls that answer `EOPNOTSUPP`.
fn no_xattrs() -> Vec<i64> {
    vec![libc::SYS_setxattr, libc::SYS_lsetxattr, libc::SYS_fsetxattr, SYS_SETXATTRAT]
}

/// Rules matching when argument `arg` has a setuid or setgid bit.
fn setid_mode(arg: u8) -> Result<Vec<SeccompRule>, SeccompError> {
    SETID_BITS
        .iter()
        .map(|&bit| {
            let cond = SeccompCondition::new(
                arg,
                SeccompCmpArgLen::Dword,
                SeccompCmpOp::MaskedEq(bit),
                bit,
            )?;
            Ok(SeccompRule::new(vec![cond])?)
        })
        .collect()
}

/// The `EPERM` filter: unconditional refusals plus the argument checks.
fn eperm_rules() -> Result<BTreeMap<i64, Vec<SeccompRule>>, SeccompError> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> =
        always_refused().into_iter().map(|call| (call, Vec::new())).collect();
    // (call, index of its mode argument)
    let mut moded: Vec<(i64, u8)> = vec![
        (libc::SYS_fchmod, 1),
        (libc::SYS_fchmodat, 2),
        (libc::SYS_fchmodat2, 2),
        (libc::SYS_openat, 3),
        (libc::SYS_mkdirat, 2),
        (libc::SYS_mknodat, 2),
    ];
    #[cfg(target_arch = "x86_64")]
    moded.extend([
        (libc::SYS_chmod, 1),
        (libc::SYS_open, 2),
        (libc::SYS_creat, 1),
        (libc::SYS_mkdir, 1),
        (libc::SYS_mknod, 1),
    ]);
    for (call, arg) in moded {
        rules.insert(call, setid_mode(arg)?);
    }
    let newuser = SeccompCondition::new(
        0,
        SeccompCmpArgLen::Qword,
        SeccompCmpOp::MaskedEq(CLONE_NEWUSER),
        CLONE_NEWUSER,
    )?;
    rules.insert(libc::SYS_clone, vec![SeccompRule::new(vec![newuser])?]);
    Ok(rules)
}

fn compile(
    rules: BTreeMap<i64, Vec<SeccompRule>>,
    errno: i32,
    arch: TargetArch,
) -> Result<BpfProgram, SeccompError> {
    let errno = u32::try_from(errno).unwrap_or(1);
    let filter =
        SeccompFilter::new(rules, SeccompAction::Allow, SeccompAction::Errno(errno), arch)?;
    Ok(filter.try_into()?)
}

/// The compiled programs (one per error number; the kernel applies them all).
pub fn programs() -> Result<Vec<BpfProgram>, SeccompError> {
    let arch = arch()?;
    let plain = |calls: Vec<i64>| calls.into_iter().map(|c| (c, Vec::new())).collect();
    Ok(vec![
        compile(eperm_rules()?, libc::EPERM, arch)?,
        compile(plain(unsupported()), libc::ENOSYS, arch)?,
        compile(plain(no_xattrs()), libc::EOPNOTSUPP, arch)?,
        compile(other_families()?, libc::EAFNOSUPPORT, arch)?,
    ])
}

/// Installs the filter on the calling thread (and so on everything it starts later). Call it
/// while the process has one thread.
pub fn install() -> Result<(), SeccompError> {
    for program in programs()? {
        seccompiler::apply_filter(&program)?;
    }
    Ok(())
}
