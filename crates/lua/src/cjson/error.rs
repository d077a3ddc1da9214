//! The errors lua-cjson raises with `luaL_error`, kept apart from the module's state so
//! that the settings and the codec raise them without importing the module that holds them.

/// An error lua-cjson raises with `luaL_error`: its message, to which the raising call
/// adds where the Lua code that called it stands ([`finish`]).
#[derive(Debug)]
pub(super) struct CjsonError(String);

impl std::fmt::Display for CjsonError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CjsonError {}

pub(super) fn raise(msg: impl Into<String>) -> mlua::Error {
    mlua::Error::external(CjsonError(msg.into()))
}

/// The text of a [`CjsonError`], if `e` is one.
pub(super) fn cjson_error(e: &mlua::Error) -> Option<&str> {
    match e {
        mlua::Error::ExternalError(inner) => inner.downcast_ref::<CjsonError>().map(|c| &*c.0),
        _ => None,
    }
}
