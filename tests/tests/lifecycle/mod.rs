//! A process's life: spawn and its errors, idempotency keys, names,
//! deadlines, the unattached timeout, signals it sends itself, kill and
//! DELETE (two things), stubborn and forking children, and the exit
//! reported with its final fields.

use std::time::Duration;

use serde_json::json;
use tether_protocol::{ClientFrame, ExitReason, ProcessStatus};
use tether_tests::{
    kill_session, session_members, wait_session_gone, Attachment, Received, TestServer,
};

mod deadlines;
mod kill_and_forget;
mod names;
mod run;
mod spawn;
mod unattached;
