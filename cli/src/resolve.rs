//! Naming processes on the command line: a full id, a name given at spawn,
//! or any unique prefix of an id (the web terminal shows 8 characters).

use tether_client::{Client, Error, ProcessInfo};

/// Length of a full process id (32 hex digits).
const ID_LEN: usize = 32;
/// Candidates listed when a prefix is ambiguous.
const MAX_LISTED: usize = 10;

/// The id that `given` names. A full id is used as it is. Otherwise the
/// processes are listed: an exact id or name wins, then a unique id
/// prefix; a prefix of several ids is an error that lists them; no match
/// is left to the server to answer (404 `not_found`). A token that may not
/// list (one scoped to a process) passes `given` on as it is.
pub async fn resolve(client: &Client, given: &str) -> Result<String, Error> {
    if given.is_empty() {
        return Err(Error::InvalidArgument("the process id is empty".into()));
    }
    if given.len() == ID_LEN && given.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Ok(given.to_string());
    }
    let list = match client.list().await {
        Ok(list) => list,
        // A token scoped to one process may not list: the server resolves
        // that process's name itself (and refuses anything else).
        Err(Error::Http { status: 403, .. }) => return Ok(given.to_string()),
        Err(error) => return Err(error),
    };
    pick(&list, given)
}

fn pick(list: &[ProcessInfo], given: &str) -> Result<String, Error> {
    if let Some(p) = list
        .iter()
        .find(|p| p.id == given || p.name.as_deref() == Some(given))
    {
        return Ok(p.id.clone());
    }
    let candidates: Vec<&ProcessInfo> = list.iter().filter(|p| p.id.starts_with(given)).collect();
    match candidates.as_slice() {
        [] => Ok(given.to_string()),
        [one] => Ok(one.id.clone()),
        many => {
            let mut message = format!(
                "{given:?} is ambiguous: it starts {} process ids:",
                many.len()
            );
            for p in many.iter().take(MAX_LISTED) {
                let status = if p.is_exited() { "exited" } else { "running" };
                message.push_str(&format!("\n  {}  {status:<7}  {}", p.id, p.argv.join(" ")));
            }
            if many.len() > MAX_LISTED {
                message.push_str(&format!("\n  ... and {} more", many.len() - MAX_LISTED));
            }
            message.push_str("\ngive more of the id");
            Err(Error::InvalidArgument(message))
        }
    }
}
