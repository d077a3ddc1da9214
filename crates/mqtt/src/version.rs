//! The MQTT versions a CONNECT may ask for: a leaf the reader and the refusal both use.

/// The protocol version a client asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Version {
    /// MQTT 3.1 (`MQIsdp`, level 3).
    V31,
    /// MQTT 3.1.1 (`MQTT`, level 4).
    V311,
    /// MQTT 5.0 (`MQTT`, level 5).
    V5,
}

impl Version {
    /// Its name in logs (`3.1`, `3.1.1`, `5`).
    pub fn name(self) -> &'static str {
        match self {
            Version::V31 => "3.1",
            Version::V311 => "3.1.1",
            Version::V5 => "5",
        }
    }
}
