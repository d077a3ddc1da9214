//! A rule's targets (`ARGS|!ARGS:id|&REQUEST_HEADERS:Host|XML:/*`): which values of the
//! transaction it inspects, parsed as ModSecurity v3 and Coraza parse them.

/// The variables the engine knows, ModSecurity v3's names. A name not here is refused at load.
#[expect(
    missing_docs,
    reason = "each variant is the ModSecurity variable of the same name (NAMES)"
)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Var {
    Args,
    ArgsGet,
    ArgsPost,
    ArgsNames,
    ArgsGetNames,
    ArgsPostNames,
    ArgsCombinedSize,
    RequestHeaders,
    RequestHeadersNames,
    RequestCookies,
    RequestCookiesNames,
    ResponseHeaders,
    ResponseHeadersNames,
    Files,
    FilesNames,
    FilesSizes,
    FilesCombinedSize,
    MultipartPartHeaders,
    Tx,
    Ip,
    Global,
    Xml,
    MatchedVars,
    MatchedVarsNames,
    Geo,
    RequestUri,
    RequestUriRaw,
    RequestFilename,
    RequestBasename,
    RequestLine,
    RequestMethod,
    RequestProtocol,
    QueryString,
    RequestBody,
    RequestBodyLength,
    ResponseBody,
    ResponseStatus,
    ResponseProtocol,
    ResponseContentType,
    ResponseContentLength,
    RemoteAddr,
    RemotePort,
    ServerAddr,
    ServerPort,
    UniqueId,
    Duration,
    ReqbodyProcessor,
    ReqbodyError,
    ReqbodyErrorMsg,
    MultipartStrictError,
    MultipartUnmatchedBoundary,
    InboundDataError,
    OutboundDataError,
    FullRequestLength,
    MatchedVar,
    MatchedVarName,
    HighestSeverity,
}

/// Each variable's name as rules write it (upper case; matched without regard to case).
const NAMES: &[(&str, Var)] = &[
    ("ARGS", Var::Args),
    ("ARGS_GET", Var::ArgsGet),
    ("ARGS_POST", Var::ArgsPost),
    ("ARGS_NAMES", Var::ArgsNames),
    ("ARGS_GET_NAMES", Var::ArgsGetNames),
    ("ARGS_POST_NAMES", Var::ArgsPostNames),
    ("ARGS_COMBINED_SIZE", Var::ArgsCombinedSize),
    ("REQUEST_HEADERS", Var::RequestHeaders),
    ("REQUEST_HEADERS_NAMES", Var::RequestHeadersNames),
    ("REQUEST_COOKIES", Var::RequestCookies),
    ("REQUEST_COOKIES_NAMES", Var::RequestCookiesNames),
    ("RESPONSE_HEADERS", Var::ResponseHeaders),
    ("RESPONSE_HEADERS_NAMES", Var::ResponseHeadersNames),
    ("FILES", Var::Files),
    ("FILES_NAMES", Var::FilesNames),
    ("FILES_SIZES", Var::FilesSizes),
    ("FILES_COMBINED_SIZE", Var::FilesCombinedSize),
    ("MULTIPART_PART_HEADERS", Var::MultipartPartHeaders),
    ("TX", Var::Tx),
    ("IP", Var::Ip),
    ("GLOBAL", Var::Global),
    ("XML", Var::Xml),
    ("MATCHED_VARS", Var::MatchedVars),
    ("MATCHED_VARS_NAMES", Var::MatchedVarsNames),
    ("GEO", Var::Geo),
    ("REQUEST_URI", Var::RequestUri),
    ("REQUEST_URI_RAW", Var::RequestUriRaw),
    ("REQUEST_FILENAME", Var::RequestFilename),
    ("REQUEST_BASENAME", Var::RequestBasename),
    ("REQUEST_LINE", Var::RequestLine),
    ("REQUEST_METHOD", Var::RequestMethod),
    ("REQUEST_PROTOCOL", Var::RequestProtocol),
    ("QUERY_STRING", Var::QueryString),
    ("REQUEST_BODY", Var::RequestBody),
    ("REQUEST_BODY_LENGTH", Var::RequestBodyLength),
    ("RESPONSE_BODY", Var::ResponseBody),
    ("RESPONSE_STATUS", Var::ResponseStatus),
    ("RESPONSE_PROTOCOL", Var::ResponseProtocol),
    ("RESPONSE_CONTENT_TYPE", Var::ResponseContentType),
    ("RESPONSE_CONTENT_LENGTH", Var::ResponseContentLength),
    ("REMOTE_ADDR", Var::RemoteAddr),
    ("REMOTE_PORT", Var::RemotePort),
    ("SERVER_ADDR", Var::ServerAddr),
    ("SERVER_PORT", Var::ServerPort),
    ("UNIQUE_ID", Var::UniqueId),
    ("DURATION", Var::Duration),
    ("REQBODY_PROCESSOR", Var::ReqbodyProcessor),
    ("REQBODY_ERROR", Var::ReqbodyError),
    ("REQBODY_ERROR_MSG", Var::ReqbodyErrorMsg),
    ("MULTIPART_STRICT_ERROR", Var::MultipartStrictError),
    (
        "MULTIPART_UNMATCHED_BOUNDARY",
        Var::MultipartUnmatchedBoundary,
    ),
    ("INBOUND_DATA_ERROR", Var::InboundDataError),
    ("OUTBOUND_DATA_ERROR", Var::OutboundDataError),
    ("FULL_REQUEST_LENGTH", Var::FullRequestLength),
    ("MATCHED_VAR", Var::MatchedVar),
    ("MATCHED_VAR_NAME", Var::MatchedVarName),
    ("HIGHEST_SEVERITY", Var::HighestSeverity),
];

impl Var {
    /// The variable named `name` (any case).
    pub fn named(name: &str) -> Option<Var> {
        NAMES
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|&(_, v)| v)
    }

    /// Its name as rules write it.
    pub fn name(self) -> &'static str {
        NAMES
            .iter()
            .find(|&&(_, v)| v == self)
            .map_or("?", |(n, _)| n)
    }

    /// Whether it holds many values by key (a selector, `!` and `&` apply).
    pub fn is_collection(self) -> bool {
        use Var::*;
        matches!(
            self,
            Args | ArgsGet
                | ArgsPost
                | ArgsNames
                | ArgsGetNames
                | ArgsPostNames
                | RequestHeaders
                | RequestHeadersNames
                | RequestCookies
                | RequestCookiesNames
                | ResponseHeaders
                | ResponseHeadersNames
                | Files
                | FilesNames
                | FilesSizes
                | MultipartPartHeaders
                | Tx
                | Ip
                | Global
                | Xml
                | MatchedVars
                | MatchedVarsNames
                | Geo
        )
    }

    /// Whether a rule's `setvar`/`expirevar` may write it (`tx.`, `ip.`, `global.`).
    pub fn is_writable(self) -> bool {
        matches!(self, Var::Tx | Var::Ip | Var::Global)
    }
}

/// Which of a collection's values a target takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selector {
    /// All of them.
    All,
    /// Those whose key equals this, without regard to case (as ModSecurity v3 compares keys).
    Key(String),
    /// Those whose key the pattern matches (`ARGS:/^id_/`).
    Regex(String),
    /// An XPath expression over the XML body: `/*` (every text node) or `//@*` (every
    /// attribute value), the two CRS uses.
    XPath(String),
}

/// One entry of a rule's target list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The variable.
    pub var: Var,
    /// Which of a collection's values.
    pub selector: Selector,
    /// `&VAR`: the number of values instead of the values.
    pub count: bool,
    /// `!VAR:key`: taken out of the list (with its selector) rather than added.
    pub exclude: bool,
}

impl Target {
    /// The target as written, without `!` or `&` (`ARGS:id`, `ARGS:/^a/`, `XML:/*`): what
    /// `ctl:ruleRemoveTarget*` names and libmodsecurity compares.
    pub fn full_name(&self) -> String {
        let var = self.var.name();
        match &self.selector {
            Selector::All => var.to_string(),
            Selector::Key(k) | Selector::XPath(k) => format!("{var}:{k}"),
            Selector::Regex(re) => format!("{var}:/{re}/"),
        }
    }

    /// Whether [`Target::full_name`] is `name`, without making it (asked per rule while
    /// a `ctl:ruleRemoveTarget*` is in force).
    pub fn is_named(&self, name: &str) -> bool {
        let Some(rest) = name.strip_prefix(self.var.name()) else {
            return false;
        };
        match &self.selector {
            Selector::All => rest.is_empty(),
            Selector::Key(k) | Selector::XPath(k) => rest.strip_prefix(':') == Some(k.as_str()),
            Selector::Regex(re) => {
                rest.strip_prefix(":/").and_then(|r| r.strip_suffix('/')) == Some(re.as_str())
            }
        }
    }
}

/// The targets of `text`, or why not.
pub(super) fn parse(text: &str) -> Result<Vec<Target>, String> {
    let mut out = Vec::new();
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err("the rule has no variables; name at least one (e.g. ARGS)".into());
    }
    while !rest.is_empty() {
        let (target, tail) = one(rest)?;
        out.push(target);
        rest = match tail.strip_prefix('|') {
            Some(t) => t,
            None if tail.is_empty() => tail,
            None => return Err(format!("expected `|` between variables at `{tail}`")),
        };
    }
    Ok(out)
}

/// One target at the start of `s`, and what follows it.
fn one(s: &str) -> Result<(Target, &str), String> {
    let (exclude, s) = strip(s, '!');
    let (count, s) = strip(s, '&');
    let end = s.find([':', '|']).unwrap_or(s.len());
    let name = &s[..end];
    let var = Var::named(name).ok_or_else(|| {
        format!("unknown variable `{name}`; the native engine implements ModSecurity v3's request and response variables that the Core Rule Set uses (docs/waf.md); for another, use `engine = \"modsecurity\"` for this rule set")
    })?;
    let rest = &s[end..];
    let (selector, rest) = match rest.strip_prefix(':') {
        Some(sel) => selector(var, sel)?,
        None => (Selector::All, rest),
    };
    if selector != Selector::All && !var.is_collection() {
        return Err(format!("`{name}` is not a collection: it takes no `:key`"));
    }
    if exclude && selector == Selector::All {
        return Err(format!(
            "`!{name}` excludes nothing: name the key to leave out (`!{name}:key`)"
        ));
    }
    let target = Target {
        var,
        selector,
        count,
        exclude,
    };
    Ok((target, rest))
}

fn strip(s: &str, c: char) -> (bool, &str) {
    match s.strip_prefix(c) {
        Some(t) => (true, t),
        None => (false, s),
    }
}

/// The selector after `VAR:`, and what follows it.
fn selector(var: Var, s: &str) -> Result<(Selector, &str), String> {
    if var == Var::Xml {
        let end = s.find('|').unwrap_or(s.len());
        let path = &s[..end];
        return match path {
            "/*" | "//@*" => Ok((Selector::XPath(path.to_string()), &s[end..])),
            _ => Err(format!(
                "XML:{path}: the native engine evaluates the XPath expressions `/*` and `//@*` only; use `engine = \"modsecurity\"` for this rule set"
            )),
        };
    }
    // A quoted selector: `ARGS:'/^a|b$/'` or `TX:'name'`.
    if let Some(q) = s.strip_prefix('\'') {
        let end = q
            .find('\'')
            .ok_or_else(|| format!("the selector `{s}` has no closing `'`"))?;
        let inner = &q[..end];
        let sel = match inner.strip_prefix('/').and_then(|r| r.strip_suffix('/')) {
            Some(re) => Selector::Regex(re.to_string()),
            None => Selector::Key(inner.to_string()),
        };
        return Ok((sel, &q[end + 1..]));
    }
    if let Some(re) = s.strip_prefix('/') {
        let end =
            regex_end(re).ok_or_else(|| format!("the selector `/{re}` has no closing `/`"))?;
        return Ok((Selector::Regex(re[..end].to_string()), &re[end + 1..]));
    }
    let end = s.find('|').unwrap_or(s.len());
    if end == 0 {
        return Err("`:` is followed by no key; name one or leave the `:` out".into());
    }
    Ok((Selector::Key(s[..end].to_string()), &s[end..]))
}

/// The index of the `/` that closes a regular-expression selector (not escaped by `\`).
fn regex_end(s: &str) -> Option<usize> {
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        match c {
            '\\' => escaped = !escaped,
            '/' if !escaped => return Some(i),
            _ => escaped = false,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::parse;

    /// `is_named` says what comparing with `full_name` says, for each kind of selector and
    /// for names that differ by a prefix, a suffix, case or the selector's kind.
    #[test]
    fn is_named_agrees_with_full_name() {
        let targets =
            parse("ARGS|ARGS:id|ARGS:/^id_/|XML:/*|REQUEST_HEADERS:User-Agent|ARGS_NAMES").unwrap();
        let names = [
            "ARGS",
            "ARGS:id",
            "ARGS:/^id_/",
            "XML:/*",
            "REQUEST_HEADERS:User-Agent",
            "ARGS_NAMES",
            "ARGS:",
            "ARGS:ID",
            "ARGS:/^id_",
            "ARGS:^id_/",
            "ARGS:/^id_//",
            "REQUEST_HEADERS:user-agent",
            "ARGS_NAMES:x",
            "ARG",
            "XML",
        ];
        let mut equal = 0;
        for t in &targets {
            for n in names {
                assert_eq!(
                    t.is_named(n),
                    t.full_name() == n,
                    "{:?} and {n:?}",
                    t.full_name()
                );
                equal += usize::from(t.is_named(n));
            }
        }
        assert_eq!(equal, targets.len());
    }
}
