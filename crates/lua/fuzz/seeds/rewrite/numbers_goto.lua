local x = 1e+5 .. 0x1p-4 .. 3 ..4
::top:: x = x .. "\z
  more\
" goto top