//! What a real node's replies mean, with no I/O: the scripts' reply codes
//! as [`Grant`], [`Released`] and [`Renewed`], integer replies, the `ROLE`
//! reply, and the status pipeline's reply as a [`NodeLockState`].

use std::time::Duration;

use redis::Value;

use crate::error::{NodeError, NodeErrorKind};
use crate::scripts;

use std::sync::Arc;

use super::ops::{Grant, NodeLockState, Proclaimed, Record, Released, Renewed, Seen, SlotsSeen};

/// An integer reply, or one sent as a string; `nil` is 0.
pub(super) fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        Value::SimpleString(s) => s.parse().ok(),
        Value::Nil => Some(0),
        _ => None,
    }
}

/// Reads an `acquire`, `acquire_queued` or `acquire_all` reply: `{granted
/// or re-entered, fence counter}`, `{taken, PTTL or wait, [ticket]}` (a
/// negative wait is unknown) or, for a re-entry, `{missing, 0}`.
pub(super) fn grant(reply: &[Value], script: &'static str) -> Result<Grant, NodeError> {
    let code = reply.first().and_then(int);
    let value = reply.get(1).and_then(int);
    match (code, value) {
        (Some(scripts::ACQ_GRANTED | scripts::ACQ_REENTERED), Some(t)) => {
            Ok(Grant::Granted(u64::try_from(t).unwrap_or(0)))
        }
        (Some(scripts::ACQ_MISSING), _) => Ok(Grant::Missing),
        (Some(scripts::ACQ_TAKEN), Some(pttl)) => Ok(Grant::Taken(
            u64::try_from(pttl).ok().map(Duration::from_millis),
            reply
                .get(2)
                .and_then(int)
                .and_then(|t| u64::try_from(t).ok())
                .unwrap_or(0),
        )),
        _ => Err(NodeError::protocol(script)),
    }
}

/// Reads a `permits` reply: the count recorded, then each slot's PTTL.
pub(super) fn slots_seen(reply: &[Value]) -> Result<SlotsSeen, NodeError> {
    let mut values = reply.iter().map(int);
    let count = values
        .next()
        .flatten()
        .ok_or_else(|| NodeError::protocol("permits"))?;
    let held = values
        .map(|v| match v {
            Some(-2) => Ok(None),
            Some(ms) => Ok(Some(u64::try_from(ms).ok().map(Duration::from_millis))),
            None => Err(NodeError::protocol("permits")),
        })
        .collect::<Result<_, _>>()?;
    Ok(SlotsSeen { count, held })
}

/// Reads a `proclaim` reply code.
pub(super) fn proclaimed(code: i64) -> Result<Proclaimed, NodeError> {
    match code {
        1 => Ok(Proclaimed::Written),
        0 => Ok(Proclaimed::NotHeld),
        -1 => Ok(Proclaimed::Superseded),
        _ => Err(NodeError::protocol("proclaim")),
    }
}

/// A bulk string reply as text.
fn text(v: &Value) -> Option<Arc<str>> {
    match v {
        Value::BulkString(b) => std::str::from_utf8(b).ok().map(Into::into),
        Value::SimpleString(s) => Some(s.as_str().into()),
        _ => None,
    }
}

/// Reads a `leader` reply: `{0}`, `{1, pttl}` or `{2, pttl, holder, term,
/// rev, value}`; a PTTL below 0 (no expiry) is `None`.
pub(super) fn seen(reply: &[Value]) -> Result<Seen, NodeError> {
    let bad = || NodeError::protocol("leader");
    let pttl = || {
        reply
            .get(1)
            .and_then(int)
            .and_then(|p| u64::try_from(p).ok())
            .map(Duration::from_millis)
    };
    let num = |i: usize| {
        reply
            .get(i)
            .and_then(int)
            .and_then(|n| u64::try_from(n).ok())
    };
    match reply.first().and_then(int) {
        Some(0) => Ok(Seen::Vacant),
        Some(1) => Ok(Seen::Unproclaimed(pttl())),
        Some(2) => {
            let record = Record {
                holder: reply.get(2).and_then(text).ok_or_else(bad)?,
                term: num(3).ok_or_else(bad)?,
                rev: num(4).ok_or_else(bad)?,
                value: reply.get(5).and_then(text).ok_or_else(bad)?,
            };
            Ok(Seen::Leads(record, pttl()))
        }
        _ => Err(bad()),
    }
}

/// Reads a `release` reply code.
pub(super) fn released(code: i64) -> Result<Released, NodeError> {
    match code {
        scripts::REL_RELEASED => Ok(Released::Deleted),
        scripts::REL_LOWERED => Ok(Released::Lowered),
        scripts::REL_MISSING => Ok(Released::Missing),
        scripts::REL_OTHER_OWNER => Ok(Released::OtherOwner),
        _ => Err(NodeError::protocol("release")),
    }
}

/// Reads the codes of a renew or repair batch, one per lock of `expected`.
pub(super) fn renewed(codes: Vec<i64>, expected: usize) -> Result<Vec<Renewed>, NodeError> {
    if codes.len() != expected {
        return Err(NodeError::protocol("renew batch length"));
    }
    codes.into_iter().map(renewed_code).collect()
}

/// Reads the codes of a batch sent in parts, one per lock: `None` where
/// the part that carried the lock failed ([`Renewed::Failed`]).
pub(super) fn renewed_in_parts(codes: Vec<Option<i64>>) -> Result<Vec<Renewed>, NodeError> {
    codes
        .into_iter()
        .map(|c| c.map_or(Ok(Renewed::Failed), renewed_code))
        .collect()
}

fn renewed_code(code: i64) -> Result<Renewed, NodeError> {
    if let Some(left) = code
        .checked_sub(scripts::KEEP_KEPT_FOR)
        .and_then(|ms| u64::try_from(ms).ok())
    {
        return Ok(Renewed::Kept(Duration::from_millis(left)));
    }
    match code {
        scripts::RENEW_EXTENDED => Ok(Renewed::Extended),
        scripts::RENEW_REPAIRED => Ok(Renewed::Repaired),
        scripts::RENEW_MISSING => Ok(Renewed::Missing),
        scripts::RENEW_CONFLICT => Ok(Renewed::Conflict),
        scripts::RENEW_WRONGTYPE => Ok(Renewed::WrongType),
        _ => Err(NodeError::protocol("renew")),
    }
}

/// Reads the `ROLE` reply: `master`, `slave` or `sentinel`; `unknown role`
/// when it names none.
pub(super) fn role(reply: &Value) -> String {
    let role = match reply {
        Value::Array(items) => match items.first() {
            Some(Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
            Some(Value::SimpleString(s)) => s.clone(),
            _ => String::new(),
        },
        _ => String::new(),
    };
    if role.is_empty() {
        "unknown role".to_owned()
    } else {
        role
    }
}

/// Reads the status pipeline's reply (`HGETALL` of the lock key, its
/// `PTTL`, `GET` of the fence counter) as what the node holds.
pub(super) fn lock_state(
    fields: Vec<(String, String)>,
    pttl: i64,
    fence: Option<String>,
) -> Result<NodeLockState, NodeError> {
    let fence = match fence {
        None => 0,
        Some(f) => f.parse().map_err(|_| {
            NodeError::new(NodeErrorKind::WrongType, "fence counter is not an integer")
        })?,
    };
    let (holder, hold_count) = match fields.into_iter().next() {
        Some((owner, count)) => (Some(owner), count.parse().unwrap_or(0)),
        None => (None, 0),
    };
    Ok(NodeLockState {
        holder,
        hold_count,
        pttl: u64::try_from(pttl).ok().map(Duration::from_millis),
        fence,
        shard: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn integers_come_as_numbers_strings_or_nil() {
        assert_eq!(int(&Value::Int(-2)), Some(-2));
        assert_eq!(int(&bulk("42")), Some(42));
        assert_eq!(int(&Value::SimpleString("7".into())), Some(7));
        assert_eq!(int(&Value::Nil), Some(0));
        assert_eq!(int(&bulk("x")), None);
        assert_eq!(int(&Value::Array(vec![])), None);
    }

    #[test]
    fn acquire_replies_are_grants() {
        let reply = |v: &[i64]| v.iter().map(|&i| Value::Int(i)).collect::<Vec<_>>();
        let read = |v: &[i64]| grant(&reply(v), "acquire");
        assert_eq!(read(&[scripts::ACQ_GRANTED, 5]), Ok(Grant::Granted(5)));
        assert_eq!(read(&[scripts::ACQ_REENTERED, 5]), Ok(Grant::Granted(5)));
        assert_eq!(read(&[scripts::ACQ_MISSING, 0]), Ok(Grant::Missing));
        let wait = Some(Duration::from_millis(900));
        assert_eq!(read(&[scripts::ACQ_TAKEN, 900]), Ok(Grant::Taken(wait, 0)));
        assert_eq!(
            read(&[scripts::ACQ_TAKEN, 900, 4]),
            Ok(Grant::Taken(wait, 4))
        );
        // A negative wait is unknown.
        assert_eq!(
            read(&[scripts::ACQ_TAKEN, -1, 4]),
            Ok(Grant::Taken(None, 4))
        );
        assert_eq!(read(&[scripts::ACQ_GRANTED, -1]), Ok(Grant::Granted(0)));
        assert!(read(&[scripts::ACQ_GRANTED]).is_err());
        assert!(read(&[99, 1]).is_err());
        assert!(read(&[]).is_err());
    }

    #[test]
    fn release_and_renew_codes() {
        assert_eq!(released(scripts::REL_RELEASED), Ok(Released::Deleted));
        assert_eq!(released(scripts::REL_LOWERED), Ok(Released::Lowered));
        assert_eq!(released(scripts::REL_MISSING), Ok(Released::Missing));
        assert_eq!(released(scripts::REL_OTHER_OWNER), Ok(Released::OtherOwner));
        assert!(released(7).is_err());
        let codes = vec![
            scripts::RENEW_EXTENDED,
            scripts::RENEW_REPAIRED,
            scripts::RENEW_MISSING,
            scripts::RENEW_CONFLICT,
            scripts::RENEW_WRONGTYPE,
        ];
        let all = [
            Renewed::Extended,
            Renewed::Repaired,
            Renewed::Missing,
            Renewed::Conflict,
            Renewed::WrongType,
        ];
        assert_eq!(renewed(codes.clone(), 5), Ok(all.to_vec()));
        assert!(renewed(codes, 4).is_err(), "one code per lock");
        assert!(renewed(vec![9], 1).is_err());
        let kept = renewed(vec![scripts::KEEP_KEPT_FOR + 1_500], 1);
        assert_eq!(kept, Ok(vec![Renewed::Kept(Duration::from_millis(1_500))]));
    }

    #[test]
    fn roles_and_lock_states() {
        let role_of = |v: Value| role(&Value::Array(vec![v, Value::Int(0)]));
        assert_eq!(role_of(bulk("master")), "master");
        assert_eq!(role_of(Value::SimpleString("slave".into())), "slave");
        assert_eq!(role_of(bulk("")), "unknown role");
        assert_eq!(role(&Value::Nil), "unknown role");

        let held = lock_state(vec![("h".into(), "2".into())], 1_500, Some("9".into()));
        let expect = NodeLockState {
            holder: Some("h".into()),
            hold_count: 2,
            pttl: Some(Duration::from_millis(1_500)),
            fence: 9,
            shard: None,
        };
        assert_eq!(held, Ok(expect));
        let free = lock_state(vec![], -2, None).expect("a free lock");
        assert_eq!(
            (free.holder, free.hold_count, free.pttl, free.fence),
            (None, 0, None, 0)
        );
        let bad = lock_state(vec![], -2, Some("x".into())).expect_err("a counter of text");
        assert_eq!(bad.kind, NodeErrorKind::WrongType);
    }
}
