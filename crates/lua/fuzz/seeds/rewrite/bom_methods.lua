local o = {}
function o:a(n) return self:b(n + 1) end
function o:b(n) if n > 3 then return n end return self:a(n) end
return o:a(0), (o.a)(o, 1), o.b{1}, #"do"
