//! The only place tollgate calls the C library directly. Each function is
//! a safe wrapper around one system call that no well-kept crate offers;
//! everything else reaches the kernel through `std`, `socket2`, `caps` and
//! the `iptables`/`ipset` binaries. Nothing here decides anything.
#![allow(unsafe_code)]

/// Sets `no_new_privs` for the calling thread and every thread or process
/// it starts afterwards: an `execve` can never grant privileges again.
pub fn set_no_new_privs() -> std::io::Result<()> {
    // SAFETY: prctl with PR_SET_NO_NEW_PRIVS takes no pointers.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
