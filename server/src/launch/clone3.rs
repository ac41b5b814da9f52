//! `clone3(CLONE_VM | CLONE_VFORK | CLONE_INTO_CGROUP)`: the child is born
//! in its cgroup. Joining by a write to `cgroup.procs` instead migrates the
//! child, which takes the kernel's cgroup-wide threadgroup lock for writing
//! (an RCU grace period: 40 us on a quiet machine, 10-25 ms on a loaded
//! one), and with `CLONE_VFORK` the server's worker thread waits for all of
//! it. glibc has no wrapper for clone3, so the system call is made here:
//! the child starts on its own stack and calls the entry function given.

use std::io;

/// `struct clone_args` of linux/sched.h (version 2, with `cgroup`).
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

/// linux/sched.h: the child starts in the cgroup `cgroup` refers to.
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// The child's entry: it must never return (exec or `_exit`).
pub type Entry = extern "C" fn(*mut libc::c_void) -> libc::c_int;

/// Starts `entry(arg)` as a child sharing our memory, on `stack`, inside
/// the cgroup directory `cgroup` (an open cgroup v2 directory); this
/// thread waits until the child has exec'd or exited. Returns its pid.
/// An error means no child was created (the caller may fall back).
///
/// # Safety
/// As for `clone(CLONE_VM | CLONE_VFORK)`: `entry` may only make system
/// calls on data that `arg` points to, which must outlive the call; the
/// caller blocks signals around it.
#[cfg(target_arch = "x86_64")]
pub unsafe fn clone_into_cgroup(
    entry: Entry,
    arg: *mut libc::c_void,
    stack: &mut [u8],
    cgroup: std::os::fd::RawFd,
) -> io::Result<libc::pid_t> {
    // The kernel starts the child with its stack pointer at
    // stack + stack_size: keep that 16-byte aligned for the call.
    let base = stack.as_mut_ptr() as u64;
    let top = (base + stack.len() as u64) & !15;
    let args = CloneArgs {
        flags: (libc::CLONE_VM | libc::CLONE_VFORK) as u64 | CLONE_INTO_CGROUP,
        exit_signal: libc::SIGCHLD as u64,
        stack: base,
        stack_size: top - base,
        cgroup: cgroup as u64,
        ..CloneArgs::default()
    };
    let ret: i64;
    // SAFETY: clone3 with the arguments above. In the parent only rax
    // (the result), rcx and r11 change. The child (rax = 0) runs on the
    // new stack, calls `entry(arg)` and, should it return, exits; it never
    // comes back to code of this function.
    unsafe {
        std::arch::asm!(
            "syscall",
            "test rax, rax",
            "jnz 2f",
            "mov rdi, r12",
            "call r13",
            "mov edi, eax",
            "mov eax, {exit}",
            "syscall",
            "ud2",
            "2:",
            exit = const libc::SYS_exit,
            inlateout("rax") libc::SYS_clone3 => ret,
            in("rdi") &args as *const CloneArgs,
            in("rsi") std::mem::size_of::<CloneArgs>(),
            in("r12") arg,
            in("r13") entry,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    if ret < 0 {
        return Err(io::Error::from_raw_os_error(-ret as i32));
    }
    Ok(ret as libc::pid_t)
}

/// Elsewhere: not available, the caller joins by `cgroup.procs`.
#[cfg(not(target_arch = "x86_64"))]
pub unsafe fn clone_into_cgroup(
    _entry: Entry,
    _arg: *mut libc::c_void,
    _stack: &mut [u8],
    _cgroup: std::os::fd::RawFd,
) -> io::Result<libc::pid_t> {
    Err(io::Error::from_raw_os_error(libc::ENOSYS))
}
