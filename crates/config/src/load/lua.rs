//! `[lua]` and `[route.lua]`: code kept as text with its file and line; script files read
//! here (and counted into the revision, so a changed script is a changed configuration).

use super::Cx;
use crate::lua::*;
use crate::raw::*;
use toml::Spanned;

type SpannedStr = Spanned<String>;

impl Cx<'_> {
    /// `[lua]`, with its defaults where absent.
    pub(super) fn lua_settings(&mut self, raw: Option<&RawLua>) -> LuaSettings {
        let mut s = LuaSettings::default();
        let Some(raw) = raw else {
            return s;
        };
        s.init = self.lua_code("[lua]", "init", raw.init.as_ref(), raw.init_file.as_ref());
        s.package_path = raw.package_path.as_ref().map(|p| p.get_ref().clone());
        for (name, size) in raw.shared_dicts.iter().flatten() {
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                self.err_at(
                    size,
                    format!("[lua] shared_dicts: `{name}` is not a name a script can write as ngx.shared.{name}"),
                    "use letters, digits and underscores",
                );
            }
            match self.size(Some(size)) {
                Some(bytes) if bytes >= 8192 => s.shared_dicts.push(SharedDictSize {
                    name: name.clone(),
                    bytes,
                }),
                Some(_) => self.err_at(
                    size,
                    format!("[lua] shared_dicts: `{name}` is smaller than 8k"),
                    "give it at least \"8k\" (NGINX's lua_shared_dict needs as much)",
                ),
                None => {}
            }
        }
        if let Some(n) = &raw.max_instructions {
            s.max_instructions = *n.get_ref();
        }
        s.jit = raw.jit.as_ref().is_none_or(|j| *j.get_ref());
        if let Some(m) = &raw.max_memory {
            match self.size(Some(m)) {
                Some(bytes) if bytes >= 1 << 20 => s.max_memory = bytes,
                Some(_) => self.err_at(
                    m,
                    "[lua] max_memory is under 1m, less than a state needs to start",
                    "give it at least \"1m\" (the default is \"64m\")",
                ),
                None => {}
            }
        }
        s
    }

    /// `[route.lua]`; `None` when it has a mistake (reported) or no script.
    pub(super) fn route_lua(
        &mut self,
        route: &str,
        raw: &Spanned<RawRouteLua>,
    ) -> Option<RouteLua> {
        let r = raw.get_ref();
        let before = self.errors.len();
        let at = format!("route `{route}` [route.lua]");
        let lua = RouteLua {
            rewrite: self.lua_code(&at, "rewrite", r.rewrite.as_ref(), r.rewrite_file.as_ref()),
            access: self.lua_code(&at, "access", r.access.as_ref(), r.access_file.as_ref()),
            content: self.lua_code(&at, "content", r.content.as_ref(), r.content_file.as_ref()),
            header_filter: self.lua_code(
                &at,
                "header_filter",
                r.header_filter.as_ref(),
                r.header_filter_file.as_ref(),
            ),
            body_filter: self.lua_code(
                &at,
                "body_filter",
                r.body_filter.as_ref(),
                r.body_filter_file.as_ref(),
            ),
            log: self.lua_code(&at, "log", r.log.as_ref(), r.log_file.as_ref()),
        };
        if lua == RouteLua::default() && self.errors.len() == before {
            self.err_at(
                raw,
                format!("{at} has no script"),
                "add one of rewrite, access, content, header_filter, body_filter, log (inline code) or the same with _file",
            );
        }
        (self.errors.len() == before).then_some(lua)
    }

    /// The code of `key` (inline) or `key_file`, never both.
    fn lua_code(
        &mut self,
        at: &str,
        key: &str,
        inline: Option<&SpannedStr>,
        file: Option<&SpannedStr>,
    ) -> Option<LuaCode> {
        match (inline, file) {
            (Some(code), Some(_)) => {
                self.err_at(
                    code,
                    format!("{at}: both {key} and {key}_file"),
                    format!(
                        "keep one: {key} for code written here, {key}_file for a script's file"
                    ),
                );
                None
            }
            (Some(code), None) => {
                let start = code.span().start;
                let mut line = self.loc.line(start);
                if self.loc.opens_multiline(start) {
                    line += 1;
                }
                let mut source = "\n".repeat(line - 1);
                source.push_str(code.get_ref());
                Some(LuaCode {
                    chunk: format!("@{}", self.loc.file()),
                    source: source.into(),
                })
            }
            (None, Some(p)) => {
                let path = self.path(p.get_ref());
                match self.read_file(&path).map(String::from_utf8) {
                    Ok(Ok(text)) => Some(LuaCode {
                        chunk: format!("@{}", path.display()),
                        source: text.into(),
                    }),
                    Ok(Err(_)) => {
                        self.err_at(
                            p,
                            format!("{at}: {key}_file {} is not UTF-8 text", path.display()),
                            "save the script as UTF-8",
                        );
                        None
                    }
                    Err(e) => {
                        self.err_at(
                            p,
                            format!("{at}: {key}_file {}: {e}", path.display()),
                            "check the path (relative paths start at the configuration file's directory)",
                        );
                        None
                    }
                }
            }
            (None, None) => None,
        }
    }
}
