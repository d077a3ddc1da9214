//! OTLP over gRPC: one collector service's `Export` (traces' or logs'), sent bytes already
//! encoded through a codec of bytes, the configured headers as metadata, TLS on tonic's
//! rustls with the configured CA (or the system's roots) and client certificate.

use bytes::{Buf, BufMut, Bytes};
use sluice_config::ClientIdentity;
use std::time::Duration;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::metadata::{Ascii, MetadataKey, MetadataValue};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

/// A failed export: its message, and whether sending the same batch again cannot help (the
/// collector refused its content or the caller's credentials).
#[derive(Debug, Clone)]
pub struct ExportError {
    /// What failed, in words.
    pub message: String,
    /// `INVALID_ARGUMENT`, `PERMISSION_DENIED`, `UNAUTHENTICATED`, `UNIMPLEMENTED`.
    pub permanent: bool,
}

/// A collector's gRPC service.
pub struct GrpcExporter {
    grpc: tonic::client::Grpc<Channel>,
    metadata: Vec<(MetadataKey<Ascii>, MetadataValue<Ascii>)>,
    path: &'static str,
}

impl GrpcExporter {
    /// To `endpoint` (`http://` or `https://`), the method at `path`. Within the tokio
    /// runtime (the channel's task is spawned on it); connects lazily.
    pub fn new(
        endpoint: &str,
        timeout: Duration,
        headers: &[(String, String)],
        (ca, identity): (Option<&[u8]>, Option<&ClientIdentity>),
        path: &'static str,
    ) -> Result<GrpcExporter, String> {
        let mut e = Endpoint::from_shared(endpoint.to_owned())
            .map_err(|e| e.to_string())?
            .timeout(timeout)
            .connect_timeout(timeout);
        if endpoint.starts_with("https://") {
            let mut tls = match ca {
                Some(pem) => ClientTlsConfig::new().ca_certificate(Certificate::from_pem(pem)),
                None => ClientTlsConfig::new().with_native_roots(),
            };
            if let Some(id) = identity {
                tls = tls.identity(Identity::from_pem(&id.cert_pem, &id.key_pem));
            }
            e = e.tls_config(tls).map_err(|e| e.to_string())?;
        }
        let metadata = headers
            .iter()
            .filter_map(|(k, v)| {
                Some((MetadataKey::from_bytes(k.as_bytes()).ok()?, v.parse().ok()?))
            })
            .collect();
        Ok(GrpcExporter {
            grpc: tonic::client::Grpc::new(e.connect_lazy()),
            metadata,
            path,
        })
    }

    /// One `Export`: what the collector rejected of it, and why.
    pub async fn export(&mut self, body: Bytes) -> Result<(u64, String), ExportError> {
        self.grpc.ready().await.map_err(|e| ExportError {
            message: e.to_string(),
            permanent: false,
        })?;
        let path = http::uri::PathAndQuery::from_static(self.path);
        let mut req = tonic::Request::new(body);
        for (k, v) in &self.metadata {
            req.metadata_mut().insert(k.clone(), v.clone());
        }
        let resp = self
            .grpc
            .unary(req, path, Raw)
            .await
            .map_err(|s| ExportError {
                message: format!("{}: {}", s.code(), s.message()),
                permanent: matches!(
                    s.code(),
                    tonic::Code::InvalidArgument
                        | tonic::Code::PermissionDenied
                        | tonic::Code::Unauthenticated
                        | tonic::Code::Unimplemented
                ),
            })?;
        Ok(crate::otlp::rejected(resp.get_ref()))
    }
}

/// A gRPC codec of bytes: the request is encoded already, the response is read by
/// [`crate::otlp::rejected`].
#[derive(Debug, Clone, Copy, Default)]
struct Raw;

impl Codec for Raw {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = Raw;
    type Decoder = Raw;

    fn encoder(&mut self) -> Raw {
        Raw
    }

    fn decoder(&mut self) -> Raw {
        Raw
    }
}

impl Encoder for Raw {
    type Item = Bytes;
    type Error = tonic::Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), tonic::Status> {
        dst.put(item);
        Ok(())
    }
}

impl Decoder for Raw {
    type Item = Bytes;
    type Error = tonic::Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, tonic::Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}
