//! The decoder of the frames a keystroke and its echo travel in: from the
//! client `stdin`, and `input` wrapping `stdin` (what every client sends by
//! default); from the server `stdout` and `stderr`. It reads the
//! MessagePack map in place, with no intermediate value and one copy of the
//! bytes; serde's internally tagged enums buffer every field of the map
//! before choosing the variant, which cost more than the rest of a
//! keystroke's decoding together.
//!
//! It takes only the exact shapes it knows (those keys once each, a binary
//! `data`, an unsigned `seq` or `offset`, nothing after the map) and answers
//! `None` for anything else, which then goes through the general decoder:
//! whatever the bytes, the result is the general decoder's (property tests
//! hold the two to it).

use crate::frame::{ClientFrame, InputAction, ServerFrame};

/// The frame, when `bytes` are a `stdout` or `stderr` frame in the plain
/// shape; `None` for anything else.
pub fn server(bytes: &[u8]) -> Option<ServerFrame> {
    let mut rest = bytes;
    if map_len(&mut rest)? != 3 {
        return None;
    }
    let mut stream = None;
    let mut offset = None;
    let mut data = None;
    for _ in 0..3 {
        match key(&mut rest)? {
            b"type" if stream.is_none() => {
                stream = Some(match str_value(&mut rest)? {
                    b"stdout" => true,
                    b"stderr" => false,
                    _ => return None,
                })
            }
            b"offset" if offset.is_none() => {
                offset = Some(rmp::decode::read_int::<u64, _>(&mut rest).ok()?)
            }
            b"data" if data.is_none() => data = Some(bin_value(&mut rest)?),
            _ => return None,
        }
    }
    if !rest.is_empty() {
        return None;
    }
    let (offset, data) = (offset?, data?);
    Some(match stream? {
        true => ServerFrame::Stdout { offset, data },
        false => ServerFrame::Stderr { offset, data },
    })
}

/// The frame, when `bytes` are a `stdin` frame or an `input` frame with a
/// `stdin` action in the plain shape; `None` for anything else.
pub fn client(bytes: &[u8]) -> Option<ClientFrame> {
    let mut rest = bytes;
    let frame = match map_len(&mut rest)? {
        2 => ClientFrame::Stdin {
            data: stdin_fields(&mut rest)?,
        },
        3 => input_fields(&mut rest)?,
        _ => return None,
    };
    rest.is_empty().then_some(frame)
}

/// The two fields of a stdin map, `type` first or not: its bytes.
fn stdin_fields(rest: &mut &[u8]) -> Option<Vec<u8>> {
    let mut typed = false;
    let mut data = None;
    for _ in 0..2 {
        match key(rest)? {
            b"type" if !typed => {
                typed = str_value(rest)? == b"stdin";
                if !typed {
                    return None;
                }
            }
            b"data" if data.is_none() => data = Some(bin_value(rest)?),
            _ => return None,
        }
    }
    data
}

/// The three fields of an `input` map whose action is stdin.
fn input_fields(rest: &mut &[u8]) -> Option<ClientFrame> {
    let mut typed = false;
    let mut seq = None;
    let mut data = None;
    for _ in 0..3 {
        match key(rest)? {
            b"type" if !typed => {
                typed = str_value(rest)? == b"input";
                if !typed {
                    return None;
                }
            }
            b"seq" if seq.is_none() => seq = Some(rmp::decode::read_int::<u64, _>(rest).ok()?),
            b"action" if data.is_none() => {
                if map_len(rest)? != 2 {
                    return None;
                }
                data = Some(stdin_fields(rest)?);
            }
            _ => return None,
        }
    }
    Some(ClientFrame::Input {
        seq: seq?,
        action: InputAction::Stdin { data: data? },
    })
}

fn map_len(rest: &mut &[u8]) -> Option<u32> {
    rmp::decode::read_map_len(rest).ok()
}

/// A map key: a string, borrowed.
fn key<'a>(rest: &mut &'a [u8]) -> Option<&'a [u8]> {
    str_value(rest)
}

/// A string's bytes, borrowed (compared with ASCII names only, so they
/// need no UTF-8 check: anything else fails the comparison).
fn str_value<'a>(rest: &mut &'a [u8]) -> Option<&'a [u8]> {
    let len = rmp::decode::read_str_len(rest).ok()? as usize;
    take(rest, len)
}

fn bin_value(rest: &mut &[u8]) -> Option<Vec<u8>> {
    let len = rmp::decode::read_bin_len(rest).ok()? as usize;
    take(rest, len).map(<[u8]>::to_vec)
}

fn take<'a>(rest: &mut &'a [u8], len: usize) -> Option<&'a [u8]> {
    if rest.len() < len {
        return None;
    }
    let (taken, after) = rest.split_at(len);
    *rest = after;
    Some(taken)
}
