//! One JSON message per `SOCK_SEQPACKET` packet, with file descriptors beside it.

use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{BorrowedFd, OwnedFd};

use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::wire::MAX_MESSAGE;

/// Most descriptors sent with one message.
const MAX_FDS: usize = 4;

/// Sends `msg` with `fds`.
pub fn send(sock: BorrowedFd<'_>, msg: &impl Serialize, fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    let bytes = serde_json::to_vec(msg).map_err(io::Error::other)?;
    if bytes.len() > MAX_MESSAGE {
        return Err(io::Error::other(format!(
            "message of {} bytes is over {MAX_MESSAGE}",
            bytes.len()
        )));
    }
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(io::Error::other("too many descriptors for one message"));
    }
    let sent =
        rustix::net::sendmsg(sock, &[io::IoSlice::new(&bytes)], &mut control, SendFlags::NOSIGNAL)?;
    if sent != bytes.len() {
        return Err(io::Error::other("message cut short"));
    }
    Ok(())
}

/// Receives one message; `None` when the other end closed.
pub fn recv<T: DeserializeOwned>(sock: BorrowedFd<'_>) -> io::Result<Option<(T, Vec<OwnedFd>)>> {
    let mut buf = vec![0u8; MAX_MESSAGE];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let got = rustix::net::recvmsg(
        sock,
        &mut [io::IoSliceMut::new(&mut buf)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    )?;
    let mut fds = Vec::new();
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(received) = message {
            fds.extend(received);
        }
    }
    if got.bytes == 0 {
        return Ok(None);
    }
    let msg = serde_json::from_slice(&buf[..got.bytes]).map_err(io::Error::other)?;
    Ok(Some((msg, fds)))
}
