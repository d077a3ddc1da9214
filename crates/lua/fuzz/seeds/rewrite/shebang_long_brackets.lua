#!/usr/bin/env luajit
local s = [==[ do ]] ]==] --[=[
repeat ]=]
return f"x"
