//! A response's variables as libmodsecurity 3.0.9 fills them (`addResponseHeader`,
//! `processResponseHeaders`, `appendResponseBody`, `processResponseBody`), from what
//! [`crate::inspect_response`] hands libmodsecurity: the header fields in `HeaderMap`
//! order, the status, ModSecurity-nginx's protocol text and the body decoded for the rules.
//! They live beside the request's in [`RequestData`]: one transaction's variables.

use super::{BodyLimit, RequestData};
use crate::facts::ResponseFacts;
use crate::native::ruleset::{LimitAction, Settings};

impl RequestData {
    /// `addResponseHeader` for each field, then `processResponseHeaders`: RESPONSE_HEADERS
    /// (+ names), RESPONSE_CONTENT_TYPE (a Content-Type's text before its first `;`, as
    /// written), RESPONSE_STATUS, RESPONSE_PROTOCOL.
    pub(crate) fn response_head(&mut self, facts: &ResponseFacts) {
        for (name, value) in &facts.headers {
            let (name, value) = (name.as_str().as_bytes(), value.as_bytes());
            self.response_headers.insert(name.to_vec(), value.to_vec());
            // `split(value, ';')` gives no part for an empty value, which leaves it unset.
            if name.eq_ignore_ascii_case(b"content-type") && !value.is_empty() {
                let first = value.split(|&b| b == b';').next().unwrap_or_default();
                self.s.response_content_type = first.to_vec();
            }
        }
        self.s.response_status = facts.status.to_string().into_bytes();
        self.s.response_protocol = facts.protocol.as_bytes().to_vec();
    }

    /// Whether phase 4 runs for this response: response body access is on and, where
    /// `SecResponseBodyMimeType` was given, the response's type is one of those listed.
    pub(crate) fn response_body_inspected(&self, settings: &Settings) -> bool {
        settings.response_body_access && self.response_type_listed(settings, true)
    }

    /// `appendResponseBody` with the whole body at once, then what `processResponseBody`
    /// sets before phase 4: OUTBOUND_DATA_ERROR, RESPONSE_BODY, RESPONSE_CONTENT_LENGTH.
    pub(crate) fn response_body(&mut self, body: &[u8], settings: &Settings) -> BodyLimit {
        let mut limit = BodyLimit::Kept;
        // An empty body is not appended (as `inspect_response` does not hand it over).
        if !body.is_empty() && self.response_type_listed(settings, false) {
            let max = settings.response_body_limit;
            if max > 0 && max < body.len() as u64 {
                self.s.outbound_data_error = b"1".to_vec();
                match settings.response_body_limit_action {
                    LimitAction::ProcessPartial => {
                        let n = usize::try_from(max).unwrap_or(body.len());
                        self.response_body_bytes = body[..n].to_vec();
                    }
                    LimitAction::Reject => limit = BodyLimit::Rejected,
                }
            } else {
                self.response_body_bytes = body.to_vec();
            }
        }
        if self.s.outbound_data_error.is_empty() {
            self.s.outbound_data_error = b"0".to_vec();
        }
        self.s.response_content_length = self.response_body_bytes.len().to_string().into_bytes();
        limit
    }

    /// Whether the response's type is among `SecResponseBodyMimeType`'s, compared as
    /// written. `processResponseBody` asks only when the directive was given (`phase`);
    /// `appendResponseBody` only when the list is not empty.
    fn response_type_listed(&self, settings: &Settings, phase: bool) -> bool {
        match &settings.response_mime_types {
            None => true,
            Some(types) if !phase && types.is_empty() => true,
            Some(types) => types
                .iter()
                .any(|t| t.as_bytes() == self.s.response_content_type.as_slice()),
        }
    }
}

#[cfg(all(test, feature = "modsecurity"))]
mod tests;
