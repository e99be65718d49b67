//! In-process servers bound inside a lab namespace.
//!
//! Why in-process rather than `nc -lk` or `python3 -m http.server`: the
//! socket is bound and listening before `serve_*` returns (no race with the
//! first probe, no `ss` polling), behaviour is identical on every machine
//! (netcat flavours differ), nothing external needs installing, and the
//! servers can report transfer sizes exactly. The listening socket is
//! created on a thread that entered the namespace; the accept loop runs on
//! an ordinary thread and stops when the lab's stop flag is set.

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv6Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use super::netns::Netns;

/// How often blocked server threads look at the stop flag.
const POLL: Duration = Duration::from_millis(100);

/// What a TCP server does with each connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Service {
    /// Writes back every byte it reads, until EOF.
    Echo,
    /// Reads until EOF, then writes the number of bytes read as 8 bytes
    /// big-endian and closes.
    Sink,
    /// Answers every HTTP/1.1 request head with `200 OK` and body
    /// `ok <method> <target>\n`, keeping the connection open.
    Http,
}

/// Binds `[::]:port` (dual-stack) in `ns` and serves `service` until `stop`.
pub fn serve_tcp(ns: &Netns, port: u16, service: Service, stop: Arc<AtomicBool>) -> JoinHandle<()> {
    let listener = ns
        .enter(move || TcpListener::bind(SocketAddr::from((Ipv6Addr::UNSPECIFIED, port))))
        .unwrap_or_else(|e| panic!("bind TCP [::]:{port} in {}: {e}", ns.name()));
    listener
        .set_nonblocking(true)
        .expect("nonblocking listener");
    std::thread::spawn(move || {
        let mut workers = Vec::new();
        while !stop.load(Ordering::SeqCst) {
            match listener.accept() {
                Ok((stream, _)) => {
                    let stop = stop.clone();
                    workers.push(std::thread::spawn(move || {
                        serve_connection(stream, service, &stop)
                    }));
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => wait_readable(&listener),
                Err(_) => wait_readable(&listener),
            }
            workers.retain(|w: &JoinHandle<()>| !w.is_finished());
        }
        for w in workers {
            let _ = w.join();
        }
    })
}

/// Binds `[::]:port` UDP in `ns` and echoes every datagram until `stop`.
pub fn serve_udp_echo(ns: &Netns, port: u16, stop: Arc<AtomicBool>) -> JoinHandle<()> {
    let socket = ns
        .enter(move || UdpSocket::bind(SocketAddr::from((Ipv6Addr::UNSPECIFIED, port))))
        .unwrap_or_else(|e| panic!("bind UDP [::]:{port} in {}: {e}", ns.name()));
    socket.set_read_timeout(Some(POLL)).expect("read timeout");
    std::thread::spawn(move || {
        let mut buf = [0u8; 2048];
        while !stop.load(Ordering::SeqCst) {
            if let Ok((n, from)) = socket.recv_from(&mut buf) {
                let _ = socket.send_to(&buf[..n], from);
            }
        }
    })
}

fn wait_readable(listener: &TcpListener) {
    use std::os::fd::AsRawFd;
    let mut pfd = libc::pollfd {
        fd: listener.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd for the duration of the call.
    unsafe { libc::poll(&mut pfd, 1, POLL.as_millis() as libc::c_int) };
}

fn serve_connection(mut stream: TcpStream, service: Service, stop: &AtomicBool) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(POLL));
    let mut buf = vec![0u8; 64 * 1024];
    let mut total: u64 = 0;
    let mut head = Vec::new();
    while !stop.load(Ordering::SeqCst) {
        let n = match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => continue,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => return,
        };
        total += n as u64;
        match service {
            Service::Echo => {
                if stream.write_all(&buf[..n]).is_err() {
                    return;
                }
            }
            Service::Sink => {}
            Service::Http => {
                head.extend_from_slice(&buf[..n]);
                while let Some(end) = find_head_end(&head) {
                    let request = String::from_utf8_lossy(&head[..end]).into_owned();
                    head.drain(..end + 4);
                    let mut words = request.split_whitespace();
                    let body = format!(
                        "ok {} {}\n",
                        words.next().unwrap_or("-"),
                        words.next().unwrap_or("-")
                    );
                    let response = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    if stream.write_all(response.as_bytes()).is_err() {
                        return;
                    }
                }
            }
        }
    }
    if service == Service::Sink {
        let _ = stream.write_all(&total.to_be_bytes());
    }
}

fn find_head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n")
}
