//! A span being recorded: its fixed fields, and its attributes encoded as they are set into
//! one buffer. Ending it copies it into the export queue; a span dropped without an end ends
//! there (a request cancelled half-way still shows).

use crate::export::Queue;
use crate::otlp::{self, SpanFields, SpanKind, Value};
use std::borrow::Cow;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// A recorded span. Attributes are added with [`Span::str`], [`Span::int`], [`Span::bool`]
/// and [`Span::display`]; each is encoded at once (keys are not deduplicated: set each
/// once).
pub struct Span {
    queue: Arc<Queue>,
    pub(crate) trace_id: u128,
    pub(crate) span_id: u64,
    parent: Option<(u64, bool)>,
    name: Cow<'static, str>,
    kind: SpanKind,
    start: u64,
    error: bool,
    attributes: Vec<u8>,
    ended: bool,
}

impl std::fmt::Debug for Span {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Span({} {:016x})", self.name, self.span_id)
    }
}

/// Nanoseconds since the Unix epoch (0 before it).
pub(crate) fn unix_nanos(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

impl Span {
    /// A span of `trace_id` under `parent` (its ID, and whether it is the caller's).
    pub(crate) fn start(
        queue: Arc<Queue>,
        trace_id: u128,
        parent: Option<(u64, bool)>,
        name: Cow<'static, str>,
        kind: SpanKind,
        start: SystemTime,
    ) -> Span {
        Span {
            queue,
            trace_id,
            span_id: new_span_id(),
            parent,
            name,
            kind,
            start: unix_nanos(start),
            error: false,
            // A server span's dozen attributes fit without growing.
            attributes: Vec::with_capacity(512),
            ended: false,
        }
    }

    /// A span under this one.
    pub(crate) fn child(
        &self,
        name: &'static str,
        kind: SpanKind,
        start: Option<SystemTime>,
    ) -> Span {
        Span::start(
            self.queue.clone(),
            self.trace_id,
            Some((self.span_id, false)),
            Cow::Borrowed(name),
            kind,
            start.unwrap_or_else(SystemTime::now),
        )
    }

    /// Its span ID.
    pub fn span_id(&self) -> u64 {
        self.span_id
    }

    /// Sets a string attribute.
    pub fn str(&mut self, key: &str, value: &str) -> &mut Span {
        otlp::key_value(
            &mut self.attributes,
            otlp::SPAN_ATTRIBUTES,
            key,
            Value::Str(value),
        );
        self
    }

    /// Sets an integer attribute.
    pub fn int(&mut self, key: &str, value: i64) -> &mut Span {
        otlp::key_value(
            &mut self.attributes,
            otlp::SPAN_ATTRIBUTES,
            key,
            Value::Int(value),
        );
        self
    }

    /// Sets a boolean attribute.
    pub fn bool(&mut self, key: &str, value: bool) -> &mut Span {
        otlp::key_value(
            &mut self.attributes,
            otlp::SPAN_ATTRIBUTES,
            key,
            Value::Bool(value),
        );
        self
    }

    /// Sets a string attribute written by `value`'s `Display` (an address, a number), on the
    /// stack where it fits.
    pub fn display(&mut self, key: &str, value: impl std::fmt::Display) -> &mut Span {
        let mut s = StackStr::default();
        if write!(s, "{value}").is_ok() {
            self.str(key, s.as_str())
        } else {
            self.str(key, &value.to_string())
        }
    }

    /// Renames it.
    pub fn rename(&mut self, name: impl Into<Cow<'static, str>>) {
        self.name = name.into();
    }

    /// Marks it failed: status ERROR and `error.type`.
    pub fn fail(&mut self, error_type: &str) {
        self.str("error.type", error_type);
        self.error = true;
    }

    /// Marks it failed with an HTTP status as its `error.type`.
    pub fn fail_status(&mut self, status: u16) {
        self.fail(itoa::Buffer::new().format(status));
    }

    /// Ends it at `end` (Unix nanoseconds): into the export queue.
    pub(crate) fn finish(&mut self, end: u64) {
        if std::mem::replace(&mut self.ended, true) {
            return;
        }
        let fields = SpanFields {
            trace_id: self.trace_id,
            span_id: self.span_id,
            parent: self.parent,
            name: &self.name,
            kind: self.kind,
            start: self.start,
            end: end.max(self.start),
            error: self.error,
        };
        let attributes = &self.attributes;
        self.queue.push(|out| fields.encode_entry(attributes, out));
    }
}

impl Drop for Span {
    fn drop(&mut self) {
        self.finish(unix_nanos(SystemTime::now()));
    }
}

/// A new random span ID (never 0, which means "none").
pub(crate) fn new_span_id() -> u64 {
    loop {
        let id = fastrand::u64(..);
        if id != 0 {
            return id;
        }
    }
}

/// A new random trace ID (never 0).
pub(crate) fn new_trace_id() -> u128 {
    loop {
        let id = fastrand::u128(..);
        if id != 0 {
            return id;
        }
    }
}

/// A short string formatted on the stack.
struct StackStr {
    buf: [u8; 64],
    len: usize,
}

impl Default for StackStr {
    fn default() -> Self {
        StackStr {
            buf: [0; 64],
            len: 0,
        }
    }
}

impl StackStr {
    fn as_str(&self) -> &str {
        // Only whole `&str`s are copied in (`write_str`): valid UTF-8.
        std::str::from_utf8(&self.buf[..self.len]).unwrap_or_default()
    }
}

impl std::fmt::Write for StackStr {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let end = self.len + s.len();
        let dst = self.buf.get_mut(self.len..end).ok_or(std::fmt::Error)?;
        dst.copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_fits_on_the_stack_or_falls_back_whole() {
        let mut s = StackStr::default();
        write!(
            s,
            "{}",
            std::net::Ipv6Addr::new(0xfe80, 1, 2, 3, 4, 5, 6, 7)
        )
        .unwrap();
        assert_eq!(s.as_str(), "fe80:1:2:3:4:5:6:7");
        let mut s = StackStr::default();
        assert!(write!(s, "{}", "é".repeat(40)).is_err());
        assert!(s.len <= 64 && std::str::from_utf8(&s.buf[..s.len]).is_ok());
    }

    #[test]
    fn ids_are_never_zero_and_differ() {
        let a: std::collections::HashSet<u64> = (0..1000).map(|_| new_span_id()).collect();
        assert_eq!(a.len(), 1000);
        assert_ne!(new_trace_id(), new_trace_id());
    }
}
