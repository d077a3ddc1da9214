-- The fuzz driver's interpreter (fuzzing.rs): bytes from ?p= (hex) picked apart into calls.
local hex = ngx.var.arg_p or ""
local bytes = hex:gsub("%x%x", function(h) return string.char(tonumber(h, 16)) end)
local pos, n = 1, #bytes
local function byte()
    local b = bytes:byte(pos) or 0
    pos = pos + 1
    return b
end
local d = ngx.shared.fuzz
local cjson = require "cjson"
local RAISING = {
    __index = function() error("fuzz: __index") end,
    __newindex = function() error("fuzz: __newindex") end,
    __tostring = function() error("fuzz: __tostring") end,
    __len = function() return 1e9 end,
    __call = function() return 1 end,
    __eq = function() error("fuzz: __eq") end,
}
local value
value = function(depth)
    local k = byte() % 20
    if k == 0 then return nil
    elseif k == 1 then return 0 / 0
    elseif k == 2 then return math.huge
    elseif k == 3 then return -math.huge
    elseif k == 4 then return 1e300
    elseif k == 5 then return -1e18
    elseif k == 6 then return 2 ^ 53 + byte()
    elseif k == 7 then return -(byte() * 256 + byte())
    elseif k == 8 then return byte() * 256 + byte()
    elseif k == 9 then return byte() / 7
    elseif k == 10 then
        local len = byte() % 32
        local s = bytes:sub(pos, pos + len - 1)
        pos = pos + len
        return s
    elseif k == 11 then return string.rep(string.char(byte()), byte() * 1024 + byte())
    elseif k == 12 then return "\0\255\r\n:\"%$0${1}" .. string.char(byte())
    elseif k == 13 then return byte() % 2 == 0
    elseif k == 14 and depth < 4 then
        local t = {}
        for i = 1, byte() % 5 do t[i] = value(depth + 1) end
        return t
    elseif k == 15 and depth < 4 then return setmetatable({ value(depth + 1) }, RAISING)
    elseif k == 16 then return setmetatable({}, RAISING)
    elseif k == 17 then return function() return value(depth + 1) end
    elseif k == 18 then return ngx.null
    else return "k" .. byte()
    end
end
local function method(name) return function(...) return d[name](d, ...) end end
local function gmatch(...)
    local it = ngx.re.gmatch(...)
    if type(it) == "function" then for _ = 1, 4 do it() end end
end
local function string_gmatch(...)
    local it = string.gmatch(...)
    for _ = 1, 4 do it() end
end
local API = {
    ngx.say, ngx.print, ngx.log, ngx.req.set_header, ngx.req.clear_header,
    ngx.req.get_headers, ngx.req.set_method, ngx.req.set_uri, ngx.req.set_uri_args,
    ngx.req.get_uri_args, ngx.req.get_body_data, ngx.escape_uri, ngx.unescape_uri,
    ngx.encode_args, ngx.decode_args, ngx.encode_base64, ngx.decode_base64, ngx.md5,
    ngx.md5_bin, ngx.sha1_bin, ngx.hmac_sha1, ngx.http_time, ngx.cookie_time,
    ngx.parse_http_time, ngx.re.match, ngx.re.find, gmatch, ngx.re.sub, ngx.re.gsub,
    method("get"), method("get_stale"), method("set"), method("safe_set"), method("add"),
    method("safe_add"), method("replace"), method("delete"), method("incr"), method("ttl"),
    method("expire"), method("get_keys"), method("flush_expired"), method("free_space"),
    cjson.encode, cjson.decode, ngx.timer.at,
    function(v) ngx.status = v end,
    function(k, v) ngx.header[k] = v end,
    function(k) return ngx.header[k] end,
    function(k) return ngx.var[k] end,
    function(k, v) ngx.var[k] = v end,
    function(v) ngx.ctx = v end,
    function(k, v) ngx.ctx[k] = v end,
    function(v) ngx.arg[1] = v end,
    string.find, string.match, string_gmatch, string.gsub,
}
local calls = 0
while pos <= n and calls < 64 do
    calls = calls + 1
    local f = API[byte() % #API + 1]
    local nargs = byte() % 6
    local args = {}
    for i = 1, nargs do args[i] = value(0) end
    pcall(f, unpack(args, 1, nargs))
end
