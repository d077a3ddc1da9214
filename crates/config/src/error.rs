use std::fmt;

/// One problem in a configuration file, located to the character.
///
/// Displayed as `file:line:column: message` and, on the next line, `help: …` saying what to
/// do, the shape compilers and linters use so that editors can jump to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The file the problem is in (or `<embedded>` / `<string>`).
    pub file: String,
    /// 1-based line.
    pub line: usize,
    /// 1-based column, counted in characters.
    pub column: usize,
    /// What is wrong.
    pub message: String,
    /// What to do about it.
    pub help: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}: {}",
            self.file, self.line, self.column, self.message
        )?;
        if !self.help.is_empty() {
            write!(f, "\n    help: {}", self.help)?;
        }
        Ok(())
    }
}

/// Every problem found while loading one configuration; loading never stops at the first.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The file itself could not be read.
    #[error("cannot read configuration file {path}: {source}; check the path and its permissions")]
    Read {
        /// The path given.
        path: String,
        /// Why reading failed.
        #[source]
        source: std::io::Error,
    },
    /// The file was read but is not a valid configuration.
    #[error("{}", render(.0))]
    Invalid(Vec<ConfigError>),
}

impl LoadError {
    /// The located problems, empty when the file could not be read at all.
    pub fn errors(&self) -> &[ConfigError] {
        match self {
            LoadError::Read { .. } => &[],
            LoadError::Invalid(errors) => errors,
        }
    }
}

fn render(errors: &[ConfigError]) -> String {
    let mut out = String::new();
    for (i, e) in errors.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(&e.to_string());
    }
    out.push_str(&format!(
        "\n{} error{} in configuration",
        errors.len(),
        if errors.len() == 1 { "" } else { "s" }
    ));
    out
}

/// Turns byte offsets into `line:column` for one source text.
pub(crate) struct Locator<'a> {
    file: &'a str,
    src: &'a str,
}

impl<'a> Locator<'a> {
    pub(crate) fn new(file: &'a str, src: &'a str) -> Self {
        Self { file, src }
    }

    /// The file named in errors.
    pub(crate) fn file(&self) -> &str {
        self.file
    }

    /// The 1-based line of `offset`.
    pub(crate) fn line(&self, offset: usize) -> usize {
        let offset = floor_char_boundary(self.src, offset.min(self.src.len()));
        self.src[..offset].matches('\n').count() + 1
    }

    /// Whether the text at `offset` opens a multi-line string whose first line break is
    /// trimmed (TOML's `'''` and `"""`): its content starts on the next line.
    pub(crate) fn opens_multiline(&self, offset: usize) -> bool {
        let rest = self.src.get(offset..).unwrap_or("");
        ["'''\n", "'''\r\n", "\"\"\"\n", "\"\"\"\r\n"]
            .iter()
            .any(|p| rest.starts_with(p))
    }

    pub(crate) fn error(
        &self,
        offset: usize,
        message: impl Into<String>,
        help: impl Into<String>,
    ) -> ConfigError {
        let offset = offset.min(self.src.len());
        let before = &self.src[..floor_char_boundary(self.src, offset)];
        let line = before.matches('\n').count() + 1;
        let column = before
            .rsplit_once('\n')
            .map_or(before, |(_, tail)| tail)
            .chars()
            .count()
            + 1;
        ConfigError {
            file: self.file.to_owned(),
            line,
            column,
            message: message.into(),
            help: help.into(),
        }
    }
}

fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}
