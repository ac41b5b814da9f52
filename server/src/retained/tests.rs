//! Retained output: appends, readers, block mode's room and its reservation.
use super::*;

fn concat(_: u64, parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

#[test]
fn a_reader_advances_its_cursor_past_what_it_is_given() {
    let output = Arc::new(RetainedOutput::new(4, Overflow::Drop));
    assert_eq!(output.append(StreamName::Stdout, b"abcdef"), 0);
    assert_eq!(output.append(StreamName::Stdout, b"g"), 6);
    let reader = output.reader([0, 0]);
    let mut cursor = Cursor::at(0);
    let next = reader.next(StreamName::Stdout, &mut cursor, 10, concat);
    assert_eq!(
        next,
        Next::Dropped {
            offset: 0,
            length: 3
        }
    );
    assert_eq!(cursor, Cursor { next: 3, sent: 0 });
    reader.next(StreamName::Stdout, &mut cursor, 10, concat);
    assert_eq!(cursor, Cursor { next: 7, sent: 4 });
    assert_eq!(output.complete(), [7, 0]);
    assert_eq!(
        reader.next(StreamName::Stdout, &mut cursor, 10, concat),
        Next::End
    );
}

#[test]
fn discarding_frees_the_bytes_and_reports_them_dropped() {
    let output = Arc::new(RetainedOutput::new(16, Overflow::Block));
    let reader = output.reader([0, 0]);
    output.append(StreamName::Stdout, b"abcdef");
    let mut cursor = Cursor::at(0);
    reader.next(StreamName::Stdout, &mut cursor, 2, concat);
    output.discard();
    assert_eq!(
        reader.next(StreamName::Stdout, &mut cursor, 0, concat),
        Next::Dropped {
            offset: 2,
            length: 4
        }
    );
    assert_eq!(
        reader.next(StreamName::Stdout, &mut cursor, 10, concat),
        Next::End
    );
    assert_eq!(output.totals(), [6, 0]);
}

#[tokio::test]
async fn block_mode_capture_waits_for_room_until_a_reader_releases() {
    let output = Arc::new(RetainedOutput::new(4, Overflow::Block));
    let reader = output.reader([0, 0]);
    output.append(StreamName::Stdout, b"abcd");
    let waiting = tokio::spawn({
        let output = output.clone();
        async move { output.room(StreamName::Stdout).await }
    });
    let mut cursors = [Cursor::at(0); 2];
    reader.next(StreamName::Stdout, &mut cursors[0], 3, concat);
    // Sent but not credited: still needed with flow control.
    reader.release(&cursors, Some([0, 0]));
    assert!(!waiting.is_finished());
    reader.release(&cursors, None);
    assert_eq!(waiting.await.unwrap(), 3);
}

#[tokio::test]
async fn dropping_the_last_reader_keeps_its_floor_and_the_exit_slack_adds_room() {
    let output = Arc::new(RetainedOutput::new(4, Overflow::Block));
    let reader = output.reader([0, 0]);
    output.append(StreamName::Stdout, b"abcd");
    drop(reader);
    // Nobody was sent anything: a reconnecting client must find it all.
    assert_eq!(output.lock().buffers[0].block_room(), 0);
    output.reaped(StreamName::Stdout);
    assert_eq!(output.room(StreamName::Stdout).await, EXIT_SLACK);
    assert_eq!(
        RetainedOutput::reservation(4, Overflow::Block, 2),
        2 * (4 + EXIT_SLACK as u64)
    );
    assert_eq!(RetainedOutput::reservation(4, Overflow::Drop, 1), 4);
}
