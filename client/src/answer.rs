//! An HTTP answer's body, read within a bound: a server cannot make the
//! client hold more than [`crate::Client::with_max_answer_bytes`] allows.

use crate::error::{Error, Result};

/// An answer's body, read up to the bound: past it, an error, and not
/// a byte more is read (the declared length is checked first).
pub(crate) async fn read_answer(
    url: &str,
    mut response: reqwest::Response,
    bound: usize,
) -> Result<Vec<u8>> {
    let too_long = || {
        Error::Protocol(format!(
            "the answer from {url} is longer than {bound} bytes (Client::with_max_answer_bytes): not read"
        ))
    };
    if response
        .content_length()
        .is_some_and(|length| length > bound as u64)
    {
        return Err(too_long());
    }
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| Error::transport(url, &e))?
    {
        if body.len() + chunk.len() > bound {
            return Err(too_long());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}
