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

/// Waits until `fd` is readable or `timeout` passes; says whether it is.
/// An interrupted wait counts as a timeout.
pub fn wait_readable(
    fd: std::os::fd::BorrowedFd<'_>,
    timeout: std::time::Duration,
) -> std::io::Result<bool> {
    use std::os::fd::AsRawFd;
    let mut pollfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let millis = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
    // SAFETY: one valid pollfd, its count 1; the fd is borrowed for the call.
    let ready = unsafe { libc::poll(&mut pollfd, 1, millis) };
    if ready < 0 {
        let error = std::io::Error::last_os_error();
        if error.kind() == std::io::ErrorKind::Interrupted {
            return Ok(false);
        }
        return Err(error);
    }
    Ok(ready > 0)
}

/// `count` receive buffers of `len` bytes for [`recv_many`], each
/// allocated zeroed on its own: where the allocator hands out fresh pages
/// (zero already, not written), those the kernel never writes to (the part
/// of a 64 KiB buffer past a DNS reply) stay unbacked; cloning one zeroed
/// buffer would have written every page of each copy.
pub fn receive_buffers(count: usize, len: usize) -> Vec<Vec<u8>> {
    (0..count).map(|_| vec![0; len]).collect()
}

/// Receives up to `buffers.len()` datagrams from `fd` in one call, without
/// waiting (`MSG_DONTWAIT`); writes each one's length (and whether it was
/// cut to its buffer) to `lengths`. Returns how many arrived: 0 when none
/// waited.
pub fn recv_many(
    fd: std::os::fd::BorrowedFd<'_>,
    buffers: &mut [Vec<u8>],
    lengths: &mut Vec<(usize, bool)>,
) -> std::io::Result<usize> {
    use std::os::fd::AsRawFd;
    lengths.clear();
    let mut iovecs: Vec<libc::iovec> = buffers
        .iter_mut()
        .map(|buffer| libc::iovec {
            iov_base: buffer.as_mut_ptr().cast(),
            iov_len: buffer.len(),
        })
        .collect();
    // SAFETY: mmsghdr is plain data; all-zero is a valid value.
    let mut headers: Vec<libc::mmsghdr> = iovecs
        .iter_mut()
        .map(|iovec| {
            let mut header: libc::mmsghdr = unsafe { std::mem::zeroed() };
            header.msg_hdr.msg_iov = iovec;
            header.msg_hdr.msg_iovlen = 1;
            header
        })
        .collect();
    let count = libc::c_uint::try_from(headers.len()).unwrap_or(libc::c_uint::MAX);
    // SAFETY: every header points at one iovec over a live, exclusively
    // borrowed buffer of the stated length; `count` headers exist.
    let received = unsafe {
        libc::recvmmsg(
            fd.as_raw_fd(),
            headers.as_mut_ptr(),
            count,
            libc::MSG_DONTWAIT,
            std::ptr::null_mut(),
        )
    };
    if received < 0 {
        let error = std::io::Error::last_os_error();
        if error.kind() == std::io::ErrorKind::WouldBlock {
            return Ok(0);
        }
        return Err(error);
    }
    let received = usize::try_from(received).unwrap_or(0);
    lengths.extend(headers.iter().take(received).map(|header| {
        let cut = header.msg_hdr.msg_flags & libc::MSG_TRUNC != 0;
        (header.msg_len as usize, cut)
    }));
    Ok(received)
}

/// Sets the socket's receive buffer to `bytes`: beyond the system's
/// `rmem_max` when the process may (`SO_RCVBUFFORCE`, CAP_NET_ADMIN),
/// else up to it (`SO_RCVBUF`). The kernel doubles the value for its
/// bookkeeping.
pub fn set_receive_buffer(fd: std::os::fd::BorrowedFd<'_>, bytes: usize) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let value = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    let set = |option| {
        // SAFETY: a c_int option value with its size; the fd is borrowed.
        unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                option,
                std::ptr::from_ref(&value).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        }
    };
    if set(libc::SO_RCVBUFFORCE) == 0 || set(libc::SO_RCVBUF) == 0 {
        return Ok(());
    }
    Err(std::io::Error::last_os_error())
}

/// Makes every allocation of 1 MiB or more a mapping of its own, given
/// back to the kernel when it is freed, and trims the heap's top past
/// 1 MiB free, for the long-running processes (the agent, the
/// controller). glibc's threshold starts at 128 KiB but rises to the
/// largest block freed so far (up to 32 MiB), after which a ruleset
/// build's large buffers come from the heap and what outlives them
/// between their freed pages keeps them resident. In the 5,000-Node
/// simulation this took the wide agent's own memory from 109–111 to 98
/// MiB for ~10 % more CPU per ruleset; at 128 KiB, 96 MiB for ~55 % more
/// (every mid-sized buffer mapped and faulted in again). Nothing where
/// the C library is not glibc, or where the operator set
/// `MALLOC_MMAP_THRESHOLD_` (glibc's own setting wins).
pub fn return_large_allocations() {
    #[cfg(target_env = "gnu")]
    if std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_none() {
        const BYTES: libc::c_int = 1024 * 1024;
        // SAFETY: mallopt takes two integers and only sets the
        // allocator's parameters; called before any thread is started.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, BYTES);
            libc::mallopt(libc::M_TRIM_THRESHOLD, BYTES);
        }
    }
}

/// Hands the heap's free pages back to the kernel (glibc's
/// `malloc_trim`): building a ruleset for a large cluster allocates
/// hundreds of MiB that glibc keeps, in its main heap and in each thread's
/// arena, after they are freed. Nothing where the C library is not glibc.
pub fn release_free_memory() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim takes no pointers; it only returns free pages.
    unsafe {
        libc::malloc_trim(0);
    }
}
