//! The seccomp filter every sandboxed program runs under (bubblewrap's `--seccomp`): the
//! system calls that reach past a namespace or into the kernel's own machinery fail with
//! `EPERM`; everything else is allowed (the namespaces, the missing capabilities and the
//! cgroups do the rest).
//!
//! Denied, as Docker's and bubblewrap-based sandboxes deny them: tracing and reading other
//! processes (`ptrace`, `process_vm_readv`/`writev`), the kernel keyrings (shared per user
//! with the host: `keyctl`, `add_key`, `request_key`), kernel modules and `kexec`, BPF
//! programs and perf events, `userfaultfd`, file handles that bypass the mount namespace
//! (`open_by_handle_at`, `name_to_handle_at`), mounts and namespaces (`mount`, `umount2`,
//! `pivot_root`, `setns`, `unshare`), io_uring (its own path into the kernel, outside this
//! filter), and the host's clock, swap, accounting, quotas, reboot and I/O ports. On x86_64
//! every x32 system call (numbers with bit 30 set) is denied, so that none of the above is
//! reached by its x32 number; a system call of another architecture's ABI kills the process.
//!
//! Decisions where the spec is silent: a denylist, not an allowlist, because the programs
//! run here are whole agent runtimes (Node.js, Python, Codex's native binary) whose system
//! calls are not ours to enumerate; `EPERM` rather than a kill, so that a runtime probing a
//! feature (libuv probes io_uring) falls back instead of dying.

/// `BPF_LD | BPF_W | BPF_ABS`.
const LD: u16 = 0x20;
/// `BPF_JMP | BPF_JEQ | BPF_K`.
const JEQ: u16 = 0x15;
/// `BPF_JMP | BPF_JGE | BPF_K`.
const JGE: u16 = 0x35;
/// `BPF_RET | BPF_K`.
const RET: u16 = 0x06;

const RET_ALLOW: u32 = 0x7fff_0000;
const RET_ERRNO: u32 = 0x0005_0000;
const RET_KILL_PROCESS: u32 = 0x8000_0000;
const EPERM: u32 = 1;

/// Offsets in `struct seccomp_data`.
const NR: u32 = 0;
const ARCH: u32 = 4;

/// x32 system calls have this bit in their number.
#[cfg(target_arch = "x86_64")]
const X32_BIT: u32 = 0x4000_0000;

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7;

/// The denied system calls of this architecture.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn denied() -> Vec<i64> {
    let mut nrs = vec![
        libc::SYS_ptrace,
        libc::SYS_process_vm_readv,
        libc::SYS_process_vm_writev,
        libc::SYS_keyctl,
        libc::SYS_add_key,
        libc::SYS_request_key,
        libc::SYS_kexec_load,
        libc::SYS_kexec_file_load,
        libc::SYS_init_module,
        libc::SYS_finit_module,
        libc::SYS_delete_module,
        libc::SYS_bpf,
        libc::SYS_perf_event_open,
        libc::SYS_userfaultfd,
        libc::SYS_open_by_handle_at,
        libc::SYS_name_to_handle_at,
        libc::SYS_mount,
        libc::SYS_umount2,
        libc::SYS_pivot_root,
        libc::SYS_setns,
        libc::SYS_unshare,
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
        libc::SYS_swapon,
        libc::SYS_swapoff,
        libc::SYS_reboot,
        libc::SYS_acct,
        libc::SYS_settimeofday,
        libc::SYS_clock_settime,
        libc::SYS_clock_adjtime,
        libc::SYS_adjtimex,
        libc::SYS_quotactl,
        libc::SYS_fsopen,
        libc::SYS_fsmount,
        libc::SYS_move_mount,
        libc::SYS_open_tree,
    ];
    #[cfg(target_arch = "x86_64")]
    nrs.extend([libc::SYS_iopl, libc::SYS_ioperm, libc::SYS_uselib]);
    nrs
}

/// One BPF instruction, as the kernel reads it (`struct sock_filter`, native endian).
fn insn(out: &mut Vec<u8>, code: u16, jt: u8, jf: u8, k: u32) {
    out.extend_from_slice(&code.to_ne_bytes());
    out.push(jt);
    out.push(jf);
    out.extend_from_slice(&k.to_ne_bytes());
}

/// The filter program, as the bytes bubblewrap reads from `--seccomp FD`; `None` on an
/// architecture this module does not know (the sandbox then runs without a filter).
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub(crate) fn program() -> Option<Vec<u8>> {
    None
}

/// The filter program, as the bytes bubblewrap reads from `--seccomp FD`.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
pub(crate) fn program() -> Option<Vec<u8>> {
    let denied = denied();
    let mut out = Vec::with_capacity((denied.len() + 8) * 8);
    // Another architecture's ABI: kill.
    insn(&mut out, LD, 0, 0, ARCH);
    insn(&mut out, JEQ, 1, 0, AUDIT_ARCH);
    insn(&mut out, RET, 0, 0, RET_KILL_PROCESS);
    insn(&mut out, LD, 0, 0, NR);
    // The jumps below skip forward to the final `ret EPERM`; each comparison is one
    // instruction, so the distance from comparison `i` is `(len - 1 - i) + 1` (past the
    // `ret ALLOW`). BPF jump offsets are 8 bits: the list is far shorter than 255.
    let len = denied.len();
    #[cfg(target_arch = "x86_64")]
    {
        // x32: every number with bit 30 set.
        let to_deny = u8::try_from(len + 1).expect("a short list");
        insn(&mut out, JGE, to_deny, 0, X32_BIT);
    }
    for (i, nr) in denied.iter().enumerate() {
        let to_deny = u8::try_from(len - i).expect("a short list");
        // Syscall numbers are small and non-negative.
        insn(
            &mut out,
            JEQ,
            to_deny,
            0,
            u32::try_from(*nr).unwrap_or(u32::MAX),
        );
    }
    insn(&mut out, RET, 0, 0, RET_ALLOW);
    insn(&mut out, RET, 0, 0, RET_ERRNO | EPERM);
    Some(out)
}

#[cfg(all(test, any(target_arch = "x86_64", target_arch = "aarch64")))]
mod tests {
    #[test]
    fn every_jump_lands_on_the_deny_instruction() {
        let program = super::program().unwrap();
        let insns: Vec<[u8; 8]> = program.chunks(8).map(|c| c.try_into().unwrap()).collect();
        let deny = insns.len() - 1;
        assert_eq!(
            u32::from_ne_bytes(insns[deny][4..8].try_into().unwrap()),
            super::RET_ERRNO | super::EPERM
        );
        for (at, insn) in insns.iter().enumerate().skip(4) {
            let code = u16::from_ne_bytes([insn[0], insn[1]]);
            if code == super::JEQ || code == super::JGE {
                assert_eq!(at + 1 + usize::from(insn[2]), deny, "instruction {at}");
                assert_eq!(insn[3], 0);
            }
        }
    }
}
