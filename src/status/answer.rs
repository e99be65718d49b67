//! Writing an answer to a client of the status socket, whole and by a
//! deadline, however slowly the client reads: what the server and the
//! observe stream share. It never reads a request nor the agent's state.

use std::io::{ErrorKind, Write};
use std::os::unix::net::UnixStream;
use std::time::Instant;

/// Writes the whole answer by `deadline`, however slowly the client reads.
pub(super) fn write_answer(
    stream: &UnixStream,
    mut bytes: &[u8],
    deadline: Instant,
) -> std::io::Result<()> {
    while !bytes.is_empty() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(ErrorKind::TimedOut.into());
        }
        stream.set_write_timeout(Some(left))?;
        match (&*stream).write(bytes) {
            Ok(0) => return Err(ErrorKind::WriteZero.into()),
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
