//! `ngx.shared.DICT`: dictionaries every worker thread's state shares, bounded in bytes,
//! with expiry, least-recently-used eviction and lua-nginx-module's return values
//! (`ok, err, forcible`). A dictionary outlives configurations while its size stays, as an
//! NGINX shared zone outlives a reload.

pub(crate) mod jit;
mod lock;
pub(crate) mod raw;

use lru::LruCache;
use mlua::{IntoLua, Lua, LuaString, MultiValue, UserData, UserDataMethods, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// What each entry costs beyond its key and value (NGINX's node, queue links, rbtree
/// pointers come to about this).
const ENTRY_OVERHEAD: usize = 64;

/// A value a dictionary holds.
#[derive(Debug, Clone, PartialEq)]
enum Stored {
    Bool(bool),
    Number(f64),
    Str(Vec<u8>),
}

impl Stored {
    fn len(&self) -> usize {
        match self {
            Stored::Str(s) => s.len(),
            _ => 8,
        }
    }

    fn into_lua(self, lua: &Lua) -> mlua::Result<Value> {
        Ok(match self {
            Stored::Bool(b) => Value::Boolean(b),
            Stored::Number(n) => Value::Number(n),
            Stored::Str(s) => Value::String(lua.create_string(s)?),
        })
    }
}

#[derive(Debug)]
struct Entry {
    value: Stored,
    flags: u32,
    expires: Option<Instant>,
}

impl Entry {
    fn expired(&self, now: Instant) -> bool {
        self.expires.is_some_and(|t| t <= now)
    }

    /// Whether it has expired by now: the clock is read only for an entry that expires,
    /// which spares the counters without a time to live a clock read per operation.
    fn expired_now(&self) -> bool {
        self.expires.is_some_and(|t| t <= Instant::now())
    }
}

/// One dictionary.
pub struct SharedDict {
    /// `ngx.shared.NAME`.
    pub name: String,
    capacity: usize,
    inner: lock::SpinMutex<Inner>,
}

struct Inner {
    entries: LruCache<Vec<u8>, Entry>,
    used: usize,
}

impl std::fmt::Debug for SharedDict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedDict")
            .field("name", &self.name)
            .field("capacity", &self.capacity)
            .finish()
    }
}

/// How a write treats an existing key and a full dictionary.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Write {
    /// `set`: always; evicts when full.
    Set,
    /// `safe_set`: always; "no memory" rather than evict.
    SafeSet,
    /// `add`: only a key not there ("exists" otherwise).
    Add,
    /// `safe_add`.
    SafeAdd,
    /// `replace`: only a key there ("not found" otherwise).
    Replace,
}

impl SharedDict {
    fn new(name: &str, capacity: usize) -> Self {
        SharedDict {
            name: name.to_owned(),
            capacity,
            inner: lock::SpinMutex::new(Inner {
                entries: LruCache::unbounded(),
                used: 0,
            }),
        }
    }

    fn lock(&self) -> lock_api::MutexGuard<'_, lock::RawSpinYield, Inner> {
        self.inner.lock()
    }

    /// Bytes in use and the capacity.
    pub fn usage(&self) -> (usize, usize) {
        (self.lock().used, self.capacity)
    }

    fn cost(key: &[u8], value: &Stored) -> usize {
        key.len() + value.len() + ENTRY_OVERHEAD
    }

    /// The value and flags of `key` (expired: none; `stale` returns it anyway, with
    /// whether it had expired).
    fn get(&self, key: &[u8], stale: bool) -> Option<(Stored, u32, bool)> {
        let mut inner = self.lock();
        let e = inner.entries.get(key)?;
        let expired = e.expired_now();
        (stale || !expired).then(|| (e.value.clone(), e.flags, expired))
    }

    /// Writes `key`; `Ok(forcible)` says whether live entries were evicted for it.
    fn write(
        &self,
        how: Write,
        key: &[u8],
        value: Option<Stored>,
        ttl: Option<Duration>,
        flags: u32,
    ) -> Result<bool, &'static str> {
        let now = Instant::now();
        let expires = expiry(now, ttl);
        let mut inner = self.lock();
        let live = inner.entries.peek(key).is_some_and(|e| !e.expired(now));
        match how {
            Write::Add | Write::SafeAdd | Write::Replace if value.is_none() => {
                return Err("attempt to add or replace nil values");
            }
            Write::Add | Write::SafeAdd if live => return Err("exists"),
            Write::Replace if !live => return Err("not found"),
            _ => {}
        }
        if let Some(old) = inner.entries.pop(key) {
            inner.used -= Self::cost(key, &old.value);
        }
        let Some(value) = value else {
            return Ok(false);
        };
        let cost = Self::cost(key, &value);
        if cost > self.capacity {
            return Err("no memory");
        }
        let mut forcible = false;
        if inner.used + cost > self.capacity {
            // Expired entries go first, then the least recently used.
            let expired: Vec<Vec<u8>> = inner
                .entries
                .iter()
                .filter(|(_, e)| e.expired(now))
                .map(|(k, _)| k.clone())
                .collect();
            for k in expired {
                if let Some(e) = inner.entries.pop(&k) {
                    inner.used -= Self::cost(&k, &e.value);
                }
            }
            if inner.used + cost > self.capacity && matches!(how, Write::SafeSet | Write::SafeAdd) {
                return Err("no memory");
            }
            while inner.used + cost > self.capacity {
                let Some((k, e)) = inner.entries.pop_lru() else {
                    break;
                };
                inner.used -= Self::cost(&k, &e.value);
                forcible = true;
            }
        }
        inner.used += cost;
        inner.entries.put(
            key.to_vec(),
            Entry {
                value,
                flags,
                expires,
            },
        );
        Ok(forcible)
    }

    /// `incr(key, by, init, init_ttl)`: the new number, whether it evicted, or why not.
    fn incr(
        &self,
        key: &[u8],
        by: f64,
        init: Option<f64>,
        init_ttl: Option<Duration>,
    ) -> Result<(f64, bool), &'static str> {
        {
            let mut inner = self.lock();
            if let Some(e) = inner.entries.get_mut(key).filter(|e| !e.expired_now()) {
                return match &mut e.value {
                    Stored::Number(n) => {
                        *n += by;
                        Ok((*n, false))
                    }
                    _ => Err("not a number"),
                };
            }
        }
        let Some(init) = init else {
            return Err("not found");
        };
        let n = init + by;
        let forcible = self.write(Write::Set, key, Some(Stored::Number(n)), init_ttl, 0)?;
        Ok((n, forcible))
    }

    /// `incr` where it needs no eviction and gives a number (not NaN): the new value, or
    /// `None` with nothing changed (the FFI path, `jit.rs`, then hands the call to the C
    /// function, which reports `forcible` and the errors).
    fn incr_unforced(&self, key: &[u8], by: f64, init: Option<f64>) -> Option<f64> {
        {
            let mut inner = self.lock();
            if let Some(e) = inner.entries.get_mut(key).filter(|e| !e.expired_now()) {
                let Stored::Number(n) = &mut e.value else {
                    return None;
                };
                let sum = *n + by;
                if sum.is_nan() {
                    return None;
                }
                *n = sum;
                return Some(sum);
            }
        }
        let n = init? + by;
        if n.is_nan() {
            return None;
        }
        let written = self.write(Write::SafeSet, key, Some(Stored::Number(n)), None, 0);
        written.ok().map(|_| n)
    }

    fn ttl(&self, key: &[u8]) -> Option<f64> {
        let now = Instant::now();
        let inner = self.lock();
        let e = inner.entries.peek(key).filter(|e| !e.expired(now))?;
        Some(
            e.expires
                .map_or(0.0, |t| t.duration_since(now).as_secs_f64()),
        )
    }

    fn expire(&self, key: &[u8], ttl: Option<Duration>) -> bool {
        let now = Instant::now();
        let expires = expiry(now, ttl);
        let mut inner = self.lock();
        match inner.entries.peek_mut(key).filter(|e| !e.expired(now)) {
            Some(e) => {
                e.expires = expires;
                true
            }
            None => false,
        }
    }

    fn keys(&self, max: usize) -> Vec<Vec<u8>> {
        let now = Instant::now();
        let inner = self.lock();
        inner
            .entries
            .iter()
            .filter(|(_, e)| !e.expired(now))
            .take(if max == 0 { usize::MAX } else { max })
            .map(|(k, _)| k.clone())
            .collect()
    }

    fn flush_all(&self) {
        let mut inner = self.lock();
        inner.entries.clear();
        inner.used = 0;
    }

    fn flush_expired(&self, max: usize) -> usize {
        let now = Instant::now();
        let mut inner = self.lock();
        let expired: Vec<Vec<u8>> = inner
            .entries
            .iter()
            .filter(|(_, e)| e.expired(now))
            .take(if max == 0 { usize::MAX } else { max })
            .map(|(k, _)| k.clone())
            .collect();
        for k in &expired {
            if let Some(e) = inner.entries.pop(k) {
                inner.used -= Self::cost(k, &e.value);
            }
        }
        expired.len()
    }
}

/// The dictionaries by name, kept across configurations while their sizes stay.
pub(crate) fn dictionaries(sizes: &[sluice_config::SharedDictSize]) -> Vec<Arc<SharedDict>> {
    static ALL: OnceLock<Mutex<HashMap<String, Arc<SharedDict>>>> = OnceLock::new();
    let mut all = ALL
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    sizes
        .iter()
        .map(|s| {
            let capacity = usize::try_from(s.bytes).unwrap_or(usize::MAX);
            let d = all
                .entry(s.name.clone())
                .and_modify(|d| {
                    if d.capacity != capacity {
                        *d = Arc::new(SharedDict::new(&s.name, capacity));
                    }
                })
                .or_insert_with(|| Arc::new(SharedDict::new(&s.name, capacity)));
            d.clone()
        })
        .collect()
}

/// A dictionary as Lua sees it (`ngx.shared.NAME`, called with `:`).
pub(crate) struct DictHandle(pub(crate) Arc<SharedDict>);

/// The longest key lua-resty-core takes.
const MAX_KEY: usize = 65535;

/// A key as lua-resty-core checks it: a nil, empty or too long key is answered `nil, err`
/// (the outer `Err`'s text), not raised; a key that is neither string nor number raises.
fn key_bytes(key: &Value) -> mlua::Result<Result<Vec<u8>, &'static str>> {
    let bytes = match key {
        Value::String(s) => s.as_bytes().to_vec(),
        Value::Number(_) | Value::Integer(_) => crate::values::number_text(key).into_bytes(),
        Value::Nil => return Ok(Err("nil key")),
        other => {
            return Err(mlua::Error::runtime(format!(
                "bad key type: {}",
                other.type_name()
            )));
        }
    };
    Ok(match bytes.len() {
        0 => Err("empty key"),
        n if n > MAX_KEY => Err("key too long"),
        _ => Ok(bytes),
    })
}

/// A value to store; `Err("bad value type")` (answered `nil, err`, as lua-resty-core
/// does) for a table, function or userdata.
fn stored(value: &Value) -> Result<Option<Stored>, &'static str> {
    Ok(match value {
        Value::Nil => None,
        Value::Boolean(b) => Some(Stored::Bool(*b)),
        Value::Integer(n) => Some(Stored::Number(*n as f64)),
        Value::Number(n) => Some(Stored::Number(*n)),
        Value::String(s) => Some(Stored::Str(s.as_bytes().to_vec())),
        _ => return Err("bad value type"),
    })
}

/// An exptime in seconds, as lua-resty-core 0.1.25 (lua-nginx-module 0.10.23's) takes it:
/// absent or 0 never expires; negative is refused with its error; NaN passes its `< 0`
/// check and NGINX's `> 0` one, so it never expires. Past what a `Duration` holds (±inf
/// included) it saturates: never expires ([`expiry`] does the same for one the clock
/// cannot reach).
fn ttl(seconds: Option<f64>) -> Result<Option<Duration>, &'static str> {
    match seconds {
        Some(s) if s < 0.0 => Err("bad \"exptime\" argument"),
        Some(s) if s > 0.0 => Ok(Duration::try_from_secs_f64(s.max(0.001)).ok()),
        _ => Ok(None),
    }
}

/// `incr`'s `init_ttl`, checked as lua-resty-core does: negative, or given without `init`,
/// is refused; else as [`ttl`].
fn init_ttl(seconds: Option<f64>, init: Option<f64>) -> Result<Option<Duration>, &'static str> {
    match seconds {
        Some(s) if s < 0.0 => Err("bad \"init_ttl\" argument"),
        Some(_) if init.is_none() => Err("must provide \"init\" when providing \"init_ttl\""),
        s => ttl(s),
    }
}

/// When an entry written now with `ttl` expires: `None` (never) for one past what the
/// clock can hold. Computed before the dictionary is changed, so that nothing can fail
/// between its size counted and its entry put.
fn expiry(now: Instant, ttl: Option<Duration>) -> Option<Instant> {
    ttl.and_then(|t| now.checked_add(t))
}

/// `ok, err, forcible` as lua-nginx-module returns them.
fn answer(r: Result<bool, &'static str>) -> (bool, Option<&'static str>, bool) {
    match r {
        Ok(forcible) => (true, None, forcible),
        Err(e) => (false, Some(e), false),
    }
}

/// A write's answer, or `nil, err` for a key or value refused before it (lua-resty-core's
/// counts: three values, or two).
fn write_answer(
    lua: &Lua,
    checked: Result<(), &'static str>,
    write: impl FnOnce() -> Result<bool, &'static str>,
) -> mlua::Result<MultiValue> {
    if let Err(e) = checked {
        return Ok(MultiValue::from_vec(vec![Value::Nil, e.into_lua(lua)?]));
    }
    let (ok, err, forcible) = answer(write());
    Ok(MultiValue::from_vec(vec![
        Value::Boolean(ok),
        err.into_lua(lua)?,
        Value::Boolean(forcible),
    ]))
}

impl UserData for DictHandle {
    fn add_methods<M: UserDataMethods<Self>>(methods: &mut M) {
        add_reads(methods);
        add_writes(methods);
        add_counters(methods);
        add_housekeeping(methods);
    }
}

/// `get` and `get_stale`.
fn add_reads<M: UserDataMethods<DictHandle>>(methods: &mut M) {
    crate::guard::method(methods, "ngx.shared.DICT", "get", |lua, d, key: Value| {
        let key = match key_bytes(&key)? {
            Ok(k) => k,
            Err(e) => return Ok(MultiValue::from_vec(vec![Value::Nil, e.into_lua(lua)?])),
        };
        // One value unless there are flags, as lua-resty-core returns.
        Ok(match d.0.get(&key, false) {
            Some((v, 0, _)) => MultiValue::from_vec(vec![v.into_lua(lua)?]),
            Some((v, flags, _)) => {
                MultiValue::from_vec(vec![v.into_lua(lua)?, Value::Integer(i64::from(flags))])
            }
            None => MultiValue::from_vec(vec![Value::Nil]),
        })
    });
    crate::guard::method(
        methods,
        "ngx.shared.DICT",
        "get_stale",
        |lua, d, key: Value| {
            let key = match key_bytes(&key)? {
                Ok(k) => k,
                Err(e) => return Ok((Value::Nil, Value::String(lua.create_string(e)?), false)),
            };
            match d.0.get(&key, true) {
                Some((v, flags, stale)) => {
                    let flags = if flags == 0 {
                        Value::Nil
                    } else {
                        Value::Integer(i64::from(flags))
                    };
                    Ok((v.into_lua(lua)?, flags, stale))
                }
                None => Ok((Value::Nil, Value::Nil, false)),
            }
        },
    );
}

/// `set`, `safe_set`, `add`, `safe_add`, `replace` and `delete`: lua-resty-core's answers.
fn add_writes<M: UserDataMethods<DictHandle>>(methods: &mut M) {
    for (name, how) in [
        ("set", Write::Set),
        ("safe_set", Write::SafeSet),
        ("add", Write::Add),
        ("safe_add", Write::SafeAdd),
        ("replace", Write::Replace),
    ] {
        crate::guard::method(
            methods,
            "ngx.shared.DICT",
            name,
            move |lua, d, (key, value, exptime, flags): (Value, Value, Option<f64>, Option<u32>)| {
                let ttl = ttl(exptime).map_err(mlua::Error::runtime)?;
                match key_bytes(&key)?.and_then(|key| Ok((key, stored(&value)?))) {
                    Ok((key, value)) => write_answer(lua, Ok(()), || {
                        d.0.write(how, &key, value, ttl, flags.unwrap_or(0))
                    }),
                    Err(e) => write_answer(lua, Err(e), || Ok(false)),
                }
            },
        );
    }
    // lua-resty-core's `delete` is `set(key, nil)`, with its answers.
    crate::guard::method(
        methods,
        "ngx.shared.DICT",
        "delete",
        |lua, d, key: Value| match key_bytes(&key)? {
            Ok(key) => write_answer(lua, Ok(()), || d.0.write(Write::Set, &key, None, None, 0)),
            Err(e) => write_answer(lua, Err(e), || Ok(false)),
        },
    );
}

/// `incr`, `ttl` and `expire`.
fn add_counters<M: UserDataMethods<DictHandle>>(methods: &mut M) {
    crate::guard::method(
        methods,
        "ngx.shared.DICT",
        "incr",
        |lua, d, (key, by, init, ttl): (Value, f64, Option<f64>, Option<f64>)| {
            let ttl = init_ttl(ttl, init).map_err(mlua::Error::runtime)?;
            // `n` alone without `init`, as lua-resty-core returns.
            let values = match key_bytes(&key)?.and_then(|key| d.0.incr(&key, by, init, ttl)) {
                Ok((n, _)) if init.is_none() => vec![Value::Number(n)],
                Ok((n, forcible)) => {
                    vec![Value::Number(n), Value::Nil, Value::Boolean(forcible)]
                }
                Err(e) => vec![Value::Nil, e.into_lua(lua)?],
            };
            Ok(MultiValue::from_vec(values))
        },
    );
    crate::guard::method(methods, "ngx.shared.DICT", "ttl", |lua, d, key: Value| {
        match key_bytes(&key)?.map(|key| d.0.ttl(&key)) {
            // The seconds alone, as lua-resty-core returns them.
            Ok(Some(t)) => Ok(MultiValue::from_vec(vec![t.into_lua(lua)?])),
            Ok(None) => Ok(MultiValue::from_vec(vec![
                Value::Nil,
                "not found".into_lua(lua)?,
            ])),
            Err(e) => Ok(MultiValue::from_vec(vec![Value::Nil, e.into_lua(lua)?])),
        }
    });
    crate::guard::method(
        methods,
        "ngx.shared.DICT",
        "expire",
        |_, d, (key, exptime): (Value, Option<f64>)| {
            let Some(exptime) = exptime else {
                return Err(mlua::Error::runtime("bad \"exptime\" argument"));
            };
            let ttl = ttl(Some(exptime)).map_err(mlua::Error::runtime)?;
            match key_bytes(&key)?.map(|key| d.0.expire(&key, ttl)) {
                Ok(true) => Ok((Some(true), None)),
                Ok(false) => Ok((None, Some("not found"))),
                Err(e) => Ok((None, Some(e))),
            }
        },
    );
}

/// `get_keys`, `flush_all`, `flush_expired`, `capacity` and `free_space`.
fn add_housekeeping<M: UserDataMethods<DictHandle>>(methods: &mut M) {
    crate::guard::method(
        methods,
        "ngx.shared.DICT",
        "get_keys",
        |lua, d, max: Option<usize>| {
            let keys = d.0.keys(max.unwrap_or(1024));
            lua.create_sequence_from(
                keys.into_iter()
                    .map(|k| lua.create_string(k))
                    .collect::<mlua::Result<Vec<LuaString>>>()?,
            )
        },
    );
    crate::guard::method(methods, "ngx.shared.DICT", "flush_all", |_, d, ()| {
        d.0.flush_all();
        Ok(())
    });
    crate::guard::method(
        methods,
        "ngx.shared.DICT",
        "flush_expired",
        |_, d, max: Option<usize>| Ok(d.0.flush_expired(max.unwrap_or(0))),
    );
    crate::guard::method(methods, "ngx.shared.DICT", "capacity", |_, d, ()| {
        Ok(d.0.capacity)
    });
    crate::guard::method(methods, "ngx.shared.DICT", "free_space", |_, d, ()| {
        let (used, cap) = d.0.usage();
        Ok(cap.saturating_sub(used))
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_dictionary_evicts_the_least_recently_used() {
        // Five entries of 165 bytes fit in 900, a sixth does not.
        let d = SharedDict::new("t", 900);
        let v = || Some(Stored::Str(vec![b'x'; 100]));
        for k in [b"a", b"b", b"c", b"d", b"e"] {
            assert_eq!(d.write(Write::Set, k, v(), None, 0), Ok(false));
        }
        assert!(d.get(b"a", false).is_some()); // a is now the most recent
        assert_eq!(
            d.write(Write::SafeSet, b"f", v(), None, 0),
            Err("no memory")
        );
        assert_eq!(d.write(Write::Set, b"f", v(), None, 0), Ok(true));
        assert!(
            d.get(b"b", false).is_none(),
            "b was the least recently used"
        );
        assert!(d.get(b"a", false).is_some());
        let (used, cap) = d.usage();
        assert!(used <= cap, "{used} > {cap}");
    }

    #[test]
    fn add_incr_and_expiry() {
        let d = SharedDict::new("t", 1 << 20);
        assert_eq!(
            d.write(Write::Add, b"k", Some(Stored::Number(1.0)), None, 0),
            Ok(false)
        );
        assert_eq!(
            d.write(Write::Add, b"k", Some(Stored::Number(2.0)), None, 0),
            Err("exists")
        );
        assert_eq!(d.incr(b"k", 2.0, None, None), Ok((3.0, false)));
        assert_eq!(d.incr(b"n", 1.0, None, None), Err("not found"));
        assert_eq!(d.incr(b"n", 1.0, Some(10.0), None), Ok((11.0, false)));
        d.write(Write::Set, b"s", Some(Stored::Str(b"x".to_vec())), None, 0)
            .unwrap();
        assert_eq!(d.incr(b"s", 1.0, None, None), Err("not a number"));
        d.write(
            Write::Set,
            b"t",
            Some(Stored::Bool(true)),
            Some(Duration::from_millis(1)),
            7,
        )
        .unwrap();
        std::thread::sleep(Duration::from_millis(5));
        assert!(d.get(b"t", false).is_none());
        assert_eq!(d.get(b"t", true), Some((Stored::Bool(true), 7, true)));
        assert_eq!(
            d.write(Write::Replace, b"t", Some(Stored::Bool(false)), None, 0),
            Err("not found")
        );
    }

    #[test]
    fn a_ttl_past_the_clock_never_expires_and_is_counted_once() {
        // On the old code `now + ttl` panicked after the entry's size was counted.
        let d = SharedDict::new("t", 1 << 20);
        for (k, secs) in [(&b"a"[..], 1e18), (b"b", f64::MAX), (b"c", f64::INFINITY)] {
            let ttl = ttl(Some(secs)).unwrap();
            assert_eq!(
                d.write(Write::Set, k, Some(Stored::Number(1.0)), ttl, 0),
                Ok(false)
            );
            assert!(d.expire(k, ttl));
            // 1e18 s is within the clock's reach (a real, distant expiry); past it, none.
            let left = d.ttl(k).unwrap();
            assert!(left == 0.0 || left > 1e17, "{left}");
        }
        assert_eq!(d.usage().0, 3 * (1 + 8 + ENTRY_OVERHEAD));
        assert_eq!(ttl(Some(f64::NAN)), Ok(None));
        assert_eq!(ttl(Some(-0.5)), Err("bad \"exptime\" argument"));
        assert_eq!(
            init_ttl(Some(1.0), None).unwrap_err(),
            "must provide \"init\" when providing \"init_ttl\""
        );
        assert_eq!(init_ttl(None, None), Ok(None));
    }
}
