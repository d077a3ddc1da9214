//! What the requests of one listener, and of one client connection, share: built by the
//! accept loop (`gateway`), read by both HTTP servers, the handler and the layer-4 relay.

use crate::access_log::AccessLog;
use crate::conn_state::ConnState;
use crate::request::filters::RoutePlan;
use crate::request::router::Router;
use crate::upstreams::dns::UpstreamSlot;
use arc_swap::ArcSwap;
use sluice_config::Listener;
use sluice_tls::TlsInfo;
use std::net::SocketAddr;
use std::sync::Arc;

/// Everything a listener's requests share.
#[derive(Debug)]
pub(crate) struct ListenerCtx {
    pub(crate) name: Arc<str>,
    pub(crate) config: Listener,
    pub(crate) router: Arc<Router>,
    pub(crate) tls: Option<sluice_tls::TlsAcceptor>,
    /// Where TLS handshakes run and how many at once (one for the gateway).
    pub(crate) handshakes: Arc<crate::handshakes::HandshakeScheduler>,
    /// Upstream groups by index (a route's `upstream`), each as it serves now.
    pub(crate) upstreams: Arc<[Arc<UpstreamSlot>]>,
    pub(crate) access_log: AccessLog,
    pub(crate) metrics: Arc<crate::ProxyMetrics>,
    pub(crate) compressor: Arc<crate::Compressor>,
    /// The response cache every route with `[route.cache]` shares.
    pub(crate) cache: Arc<crate::request::cache::ResponseCache>,
    /// `[tracing]`, if on: every request gets a span (recorded when sampled).
    pub(crate) tracer: Option<Arc<sluice_trace::Tracer>>,
    /// Each route's filters by phase, in the router's order (`Router::find_index`).
    pub(crate) plans: Arc<[RoutePlan]>,
    /// The `Alt-Svc` its TCP responses carry where it also serves HTTP/3.
    pub(crate) alt_svc: AltSvc,
    /// An MQTT listener's `[listener.mqtt.auth]` checker.
    pub(crate) mqtt_auth: Option<Arc<sluice_auth::Authenticator>>,
    /// An MQTT listener's connection rates.
    pub(crate) mqtt_rates: Option<Arc<crate::request::rate_limit::connect_rates::ConnectRates>>,
    /// The gateway's MQTT connections per client identifier (`max_connections_per_client_id`).
    pub(crate) takeovers: Arc<crate::request::rate_limit::takeover::Takeovers>,
    /// The relay `[route.mqtt]` routes hand their devices' WebSockets to.
    pub(crate) mqtt_bridge: MqttBridge,
    /// Each `[route.mqtt]` route's credentials checker and connection rates (one set for the
    /// gateway, shared by its listeners).
    pub(crate) mqtt_gates: Arc<crate::request::mqtt_gate::MqttGates>,
}

/// `Alt-Svc: h3=":PORT"; ma=86400`, which a listener that also serves HTTP/3 puts on its TCP
/// responses (RFC 9114 §3.1.1) for the port the client reached: made once for the
/// listener's configured port (formatted and validated per request, it cost 4-5% of a
/// keep-alive request's gateway CPU in `bench/ab.py`), made per request for another
/// port (one resolved from 0, a PROXY header's destination).
#[derive(Debug)]
pub(crate) struct AltSvc(Option<(u16, http::HeaderValue)>);

impl AltSvc {
    /// For a listener on `port`; `http3` off: none.
    pub(crate) fn new(http3: bool, port: u16) -> Self {
        AltSvc(http3.then(|| (port, Self::value(port))))
    }

    /// The value for a client that reached `port`.
    pub(crate) fn for_port(&self, port: u16) -> Option<http::HeaderValue> {
        match &self.0 {
            Some((made, v)) if *made == port => Some(v.clone()),
            Some(_) => Some(Self::value(port)),
            None => None,
        }
    }

    fn value(port: u16) -> http::HeaderValue {
        http::HeaderValue::try_from(format!("h3=\":{port}\"; ma=86400"))
            .expect("the text is visible ASCII")
    }
}

/// One client connection.
#[derive(Debug)]
pub(crate) struct ConnCtx {
    /// The listener as it was when the connection was accepted (timers, TLS).
    pub(crate) listener: Arc<ListenerCtx>,
    /// The listener as it is now: each request routes by the configuration current when it
    /// arrives.
    pub(crate) slot: Arc<ArcSwap<ListenerCtx>>,
    /// The client: the TCP peer, or the source a PROXY protocol header named.
    pub(crate) peer: SocketAddr,
    /// `peer`'s IP address as a header value, written once for the connection: every request
    /// forwards it (`X-Forwarded-For`, `X-Real-IP`), and formatting and validating it per
    /// request cost ~680 instructions.
    pub(crate) peer_ip: http::HeaderValue,
    /// The address the client connected to (the header's destination, if any).
    pub(crate) local: SocketAddr,
    pub(crate) tls: Option<TlsInfo>,
    pub(crate) state: Arc<ConnState>,
    /// The gateway's signals to the connection: what outlives a request on it (an MQTT
    /// device's WebSocket, `[route.mqtt]`) closes when the gateway forces its connections.
    pub(crate) signals: crate::signals::Signals,
}

/// An MQTT device's WebSocket, handed from its route (`request::mqtt_ws`) to the relay once
/// the `101` is written.
pub(crate) struct WsHandoff {
    /// The HTTP listener's context as it is now (its metrics, access log, upstream groups).
    pub(crate) listener: Arc<ListenerCtx>,
    /// The route's `[route.mqtt]`, with the brokers' group.
    pub(crate) mqtt: Arc<sluice_config::MqttProxy>,
    /// The client's connection once it has switched protocols.
    pub(crate) upgrade: crate::http1::OnUpgrade,
    pub(crate) at: crate::addresses::Addresses,
    pub(crate) signals: crate::signals::Signals,
    /// The route's credentials checker and connection rates.
    pub(crate) gate: Option<Arc<crate::request::mqtt_gate::MqttGate>>,
    /// The verified client certificate of the device's HTTPS connection, for
    /// `certificate_identity`.
    pub(crate) cert: Option<Arc<sluice_tls::ClientCert>>,
}

/// The relay that takes a device's WebSocket to its end (`layer4::mqtt_ws::bridge`, set by
/// the gateway: the relay sits above the request path, which names only the handoff).
pub(crate) type MqttBridge =
    fn(WsHandoff) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

#[cfg(test)]
mod tests {
    use super::AltSvc;

    #[test]
    fn alt_svc_names_the_port_the_client_reached_and_only_with_http3() {
        let on = AltSvc::new(true, 8443);
        assert_eq!(on.for_port(8443).unwrap(), "h3=\":8443\"; ma=86400");
        // Another port (a PROXY header's destination): its own, not the listener's.
        assert_eq!(on.for_port(9443).unwrap(), "h3=\":9443\"; ma=86400");
        assert_eq!(AltSvc::new(false, 8443).for_port(8443), None);
    }
}
