-- kvloom.lua: cache-affine, load-aware routing of kvloom replicas in HAProxy
-- (2.6, lua-load). kvloom has no balancer of its own; this file only decides
-- which server of the backend a request goes to, and HAProxy does the rest
-- (health checks, retries, redispatch, queueing). docs/scale-out.md.
--
-- Per request (http-request lua.kvloom_route):
--   1. the affinity key: the body's prompt_cache_key, else its user, else the
--      session header (KVLOOM_SESSION_HEADER, default X-Session-Id), else a
--      session recognised from the conversation itself (prefix chunks below);
--      set as txn.kvloom_key (the `hash` policy hashes it);
--   2. with KVLOOM_POLICY=dualmap: two consistent-hash rings with different
--      seeds give two candidate servers; the one that served the key last
--      (its KV cache is there) is kept unless its predicted TTFT breaks the
--      SLO (KVLOOM_TTFT_SLO_S) and the other's does not; a key not seen
--      before goes where its conversation's first chunk (the shared system
--      prompt) already went while that server's predicted TTFT stays under
--      KVLOOM_SPILL (0.5) x the SLO, else to the less loaded candidate,
--      which joins that prefix's servers (a hot replica sheds new
--      sessions); when the choice breaks the SLO, the least loaded server
--      of all if that one meets it (a hotspot). When every server is over
--      the SLO, sessions stay where their cache is: moving would only add
--      a recompute. The choice is txn.kvloom_srv, which
--      `use-server` rules follow; a server that is down is never chosen and
--      `option redispatch` covers one that dies in between.
--
-- Load: a task per server polls GET /load (running, waiting, ttft_recent_s)
-- every KVLOOM_POLL_MS; requests this router sent that wait for their
-- answer count as waiting (and are taken out of what the poll read).
-- Predicted TTFT = max(ttft_recent, 10 ms) * (1 + waiting).
--
-- Sessions without a key: the conversation text (chat messages' roles and
-- contents in order, or the prompt) is cut into KVLOOM_CHUNK_BYTES chunks,
-- each named by a chained hash of all text up to its end (as the server's
-- KV blocks are). A chunk seen by one session only is that session's; one
-- that a second session also starts with becomes shared (the common system
-- prompt). A request that covers all the chunks a session owns continues
-- that session; otherwise it starts a new one. The table is bounded
-- (KVLOOM_CHUNK_TABLE entries; emptied when full).

local POLICY = os.getenv("KVLOOM_POLICY") or "dualmap"
local BACKEND = os.getenv("KVLOOM_BACKEND") or "kvloom"
local SLO = tonumber(os.getenv("KVLOOM_TTFT_SLO_S") or "") or 1.0
local SPILL = tonumber(os.getenv("KVLOOM_SPILL") or "") or 0.5
local POLL_MS = tonumber(os.getenv("KVLOOM_POLL_MS") or "") or 200
local SESSION_HEADER = os.getenv("KVLOOM_SESSION_HEADER") or "x-session-id"
local CHUNK = tonumber(os.getenv("KVLOOM_CHUNK_BYTES") or "") or 256
local MAX_CHUNKS = 256
local CHUNK_TABLE = tonumber(os.getenv("KVLOOM_CHUNK_TABLE") or "") or 200000
local KEY_TABLE = 100000
local VNODES = 160

-- ---- hashing (64-bit FNV-1a over bytes, then a finaliser) --------------

local function fnv(s, h)
    h = h or -3750763034362895579 -- 0xcbf29ce484222325
    for i = 1, #s do
        h = (h ~ s:byte(i)) * 1099511628211
    end
    return h
end

local function mix(h)
    h = (h ~ (h >> 33)) * -49064778989728563 -- 0xff51afd7ed558ccd
    h = (h ~ (h >> 33)) * -4265267296055464877 -- 0xc4ceb9fe1a85ec53
    return h ~ (h >> 33)
end

-- unsigned order of two 64-bit integers
local function ult(a, b) return math.ult(a, b) end

-- ---- a minimal JSON reader (what routing needs from a request body) ----
-- Returns the decoded value, or nil on any error (the server will answer
-- the request with the proper error; routing then uses the fallback).

local decode
local escapes = { ['"'] = '"', ['\\'] = '\\', ['/'] = '/', b = '\b', f = '\f', n = '\n', r = '\r', t = '\t' }

local function skip_ws(s, i)
    return s:find("[^ \t\r\n]", i) or #s + 1
end

local function read_string(s, i) -- s:sub(i, i) == '"'
    local out, j = {}, i + 1
    while true do
        local k = s:find('["\\]', j)
        if not k then return nil end
        out[#out + 1] = s:sub(j, k - 1)
        if s:sub(k, k) == '"' then return table.concat(out), k + 1 end
        local e = s:sub(k + 1, k + 1)
        if e == "u" then
            local hex = s:sub(k + 2, k + 5)
            local cp = tonumber(hex, 16)
            if not cp or #hex ~= 4 then return nil end
            out[#out + 1] = utf8.char(cp) -- (surrogates kept as is: only hashed)
            j = k + 6
        elseif escapes[e] then
            out[#out + 1] = escapes[e]
            j = k + 2
        else
            return nil
        end
    end
end

decode = function(s, i, depth)
    if depth > 64 then return nil end
    i = skip_ws(s, i)
    local c = s:sub(i, i)
    if c == '"' then
        return read_string(s, i)
    elseif c == "{" then
        local obj = {}
        i = skip_ws(s, i + 1)
        if s:sub(i, i) == "}" then return obj, i + 1 end
        while true do
            if s:sub(i, i) ~= '"' then return nil end
            local k, v
            k, i = read_string(s, i)
            if not k then return nil end
            i = skip_ws(s, i)
            if s:sub(i, i) ~= ":" then return nil end
            v, i = decode(s, i + 1, depth + 1)
            if i == nil then return nil end
            obj[k] = v
            i = skip_ws(s, i)
            c = s:sub(i, i)
            if c == "}" then return obj, i + 1 end
            if c ~= "," then return nil end
            i = skip_ws(s, i + 1)
        end
    elseif c == "[" then
        local arr = {}
        i = skip_ws(s, i + 1)
        if s:sub(i, i) == "]" then return arr, i + 1 end
        while true do
            local v
            v, i = decode(s, i, depth + 1)
            if i == nil then return nil end
            arr[#arr + 1] = v
            i = skip_ws(s, i)
            c = s:sub(i, i)
            if c == "]" then return arr, i + 1 end
            if c ~= "," then return nil end
            i = i + 1
        end
    else
        local lit = s:match("^-?[%d%.eE+-]+", i)
        if lit then return tonumber(lit) or 0, i + #lit end
        for word, val in pairs({ ["true"] = true, ["false"] = false, ["null"] = false }) do
            if s:sub(i, i + #word - 1) == word then return val, i + #word end
        end
        return nil
    end
end

local function decode_body(s)
    if not s or #s == 0 then return nil end
    local ok, v, i = pcall(decode, s, 1, 0)
    if not ok or i == nil or type(v) ~= "table" then return nil end
    return v
end

-- the text of a content field: a string, or OpenAI/Anthropic parts
local function content_text(c, out)
    if type(c) == "string" then
        out[#out + 1] = c
    elseif type(c) == "table" then
        for _, p in ipairs(c) do
            if type(p) == "table" and type(p.text) == "string" then out[#out + 1] = p.text end
        end
    end
end

-- the conversation as one string, in the order the server renders it
local function conversation(b)
    local out = {}
    if type(b.system) == "string" or type(b.system) == "table" then content_text(b.system, out) end
    local msgs = b.messages or (type(b.input) == "table" and b.input) or nil
    if type(msgs) == "table" then
        for _, m in ipairs(msgs) do
            if type(m) == "table" then
                out[#out + 1] = "\0" .. tostring(m.role or m.type or "")
                content_text(m.content, out)
            end
        end
    elseif type(b.prompt) == "string" then
        out[#out + 1] = b.prompt
    elseif type(b.input) == "string" then
        out[#out + 1] = b.input
    end
    return table.concat(out)
end

-- ---- sessions recognised from their prefix chunks ----------------------

local SHARED = false
local chunk_owner, n_chunks = {}, 0 -- chunk hash -> session id, or SHARED
local owned = {}                     -- session id -> chunks it owns

-- a chunk's name: HAProxy's xxh64 converter (C) over the previous name and
-- the chunk, when it is there; else FNV-1a in Lua (byte by byte: slower)
local function chunk_hash(conv, chunk, prev)
    if conv then return conv:xxh64((prev and string.format("%016x", prev) or "") .. chunk) end
    return mix(fnv(chunk, prev))
end

local function session_of(text, conv)
    local n = math.min(#text // CHUNK, MAX_CHUNKS)
    local hs, h = {}, nil
    for i = 1, n do
        h = chunk_hash(conv, text:sub((i - 1) * CHUNK + 1, i * CHUNK), h)
        hs[i] = h
    end
    if n == 0 then return "short:" .. tostring(mix(fnv(text))) end
    -- which chunks are known, and whose
    local seen = {}
    local first_new = n + 1
    for i = 1, n do
        local o = chunk_owner[hs[i]]
        if o == nil then
            first_new = i
            break
        end
        if o ~= SHARED then seen[o] = (seen[o] or 0) + 1 end
    end
    local sid
    for s, cnt in pairs(seen) do
        if cnt >= (owned[s] or 0) then
            sid = s -- covers everything s owns: s continues
        else
            -- another session that starts as s did: what they share is shared
            for i = 1, first_new - 1 do
                if chunk_owner[hs[i]] == s then
                    chunk_owner[hs[i]] = SHARED
                    owned[s] = owned[s] - 1
                end
            end
        end
    end
    if not sid then sid = "p" .. string.format("%016x", hs[math.min(first_new, n)]) end
    if n_chunks + n > CHUNK_TABLE then
        chunk_owner, owned, n_chunks = {}, {}, 0
    end
    for i = first_new, n do
        chunk_owner[hs[i]] = sid
        owned[sid] = (owned[sid] or 0) + 1
        n_chunks = n_chunks + 1
    end
    return sid
end

-- ---- servers: rings and load -------------------------------------------

-- name -> {name, addr, running, waiting, ttft, pending, at_poll}: running and
-- waiting as the last poll read them, less this router's own requests that
-- were then inside the server waiting for their answer (at_poll of them);
-- pending: those inside it now
local servers = {}
local names = {}     -- sorted server names
local rings = {}     -- [1], [2]: arrays of {h, name}, sorted by h (unsigned)

local function build_rings()
    for r = 1, 2 do
        local ring = {}
        for _, nm in ipairs(names) do
            for v = 1, VNODES do
                ring[#ring + 1] = { h = mix(fnv(nm .. "#" .. v, r * 7919)), name = nm }
            end
        end
        table.sort(ring, function(a, b) return ult(a.h, b.h) end)
        rings[r] = ring
    end
end

local function server_up(name)
    local be = core.backends[BACKEND]
    local sv = be and be.servers[name]
    if not sv then return false end
    local st = sv:get_stats().status or ""
    return st:sub(1, 2) == "UP" -- "UP", "UP 1/2" (going down: still counted)
end

-- the first server clockwise from hash h on ring r that is up and not `avoid`
local function ring_pick(r, h, avoid)
    local ring = rings[r]
    local lo, hi = 1, #ring
    if hi == 0 then return nil end
    while lo < hi do
        local mid = (lo + hi) // 2
        if ult(ring[mid].h, h) then lo = mid + 1 else hi = mid end
    end
    if ult(ring[lo].h, h) then lo = 1 end
    for k = 0, #ring - 1 do
        local e = ring[(lo - 1 + k) % #ring + 1]
        if e.name ~= avoid and server_up(e.name) then return e.name end
    end
    return nil
end

local function load_of(name)
    local s = servers[name]
    return s.running + s.waiting + s.pending
end

-- what a poll read, without the requests this router sent that were still
-- waiting for their answer when it was sent (they are in `pending` while
-- they last, and only then): a poll taken during a one-token request made
-- an idle replica look busy until the next poll, so new sessions avoided
-- it; under load, when polls came late, one replica of three took 1 of 48
-- sessions (deploy_test, a CI run). A request routed after the poll was
-- sent but counted by it is counted twice until the next poll. Requests
-- the server did not count (more than it reports) are not inside it: an
-- answer HAProxy made itself or a client that left skips kvloom_done, and
-- they leave `pending` here.
local function take_poll(s, running, waiting, ttft)
    local own = math.min(s.at_poll, s.pending)
    local seen = math.min(own, running + waiting)
    s.pending = s.pending - (own - seen)
    local from_waiting = math.min(seen, waiting)
    s.waiting = waiting - from_waiting
    s.running = running - (seen - from_waiting)
    s.ttft = ttft
end

local function predicted_ttft(name)
    local s = servers[name]
    return math.max(s.ttft, 0.01) * (1 + s.waiting + s.pending)
end

-- the server of `list` that is up with the least `measure`, or nil
local function least_by(list, measure)
    local best, bm
    for _, nm in ipairs(list) do
        if server_up(nm) then
            local m = measure(nm)
            if not best or m < bm then best, bm = nm, m end
        end
    end
    return best
end

local function least_loaded() return least_by(names, load_of) end

local last_server = {} -- key -> server that served it last (its cache)
local last_cands = {}  -- key -> its two ring candidates then ("c1|c2")
local n_keys = 0
local homes = {}       -- prefix hash -> servers new sessions with that prefix went to
local n_homes = 0

-- the server of `hs` (up) with the least predicted TTFT, or nil
local function best_home(hs) return least_by(hs or {}, predicted_ttft) end

-- A new session goes where its prefix (the conversation's first chunk: the
-- shared system prompt) already went: the least loaded of those servers
-- while its predicted TTFT stays under SPILL x SLO; else the less loaded of
-- its own two candidates, which then joins the prefix's servers (a busy
-- prefix spreads as its load grows, a quiet one keeps one server); past the
-- SLO, the least loaded of all. bench/cluster_sim.py simulates the same
-- rule (docs/scale-out.md: at 1,024 replicas, sessions scattered by their
-- own keys recomputed their tenant's prompt on most replicas).
local function place_new(prefix, c1, c2)
    local hs = prefix and homes[prefix]
    local h = best_home(hs)
    if h and predicted_ttft(h) <= SPILL * SLO then return h end
    local pick = load_of(c2) < load_of(c1) and c2 or c1
    if predicted_ttft(pick) > SLO then
        local g = least_loaded()
        if g and predicted_ttft(g) < predicted_ttft(pick) then pick = g end
    end
    if h and predicted_ttft(h) <= predicted_ttft(pick) then return h end
    if prefix then
        if not hs then
            n_homes = n_homes + 1
            if n_homes > KEY_TABLE then homes, n_homes = {}, 1 end
            hs = {}
            homes[prefix] = hs
        end
        local known = false
        for _, nm in ipairs(hs) do known = known or nm == pick end
        if not known then hs[#hs + 1] = pick end
    end
    return pick
end

local function dualmap(key, prefix)
    local h = mix(fnv(key))
    local c1 = ring_pick(1, h, nil)
    if not c1 then return nil end
    local c2 = ring_pick(2, mix(h ~ 0x5bd1e995), c1) or c1
    local cached = last_server[key]
    local pick
    if cached == nil then
        pick = place_new(prefix, c1, c2)
    else
        pick = cached
        if cached == c1 or cached == c2 then
            -- the cache-affine one, unless its queue breaks the SLO and the
            -- other's does not (when both do, moving only adds a recompute)
            local other = cached == c1 and c2 or c1
            if predicted_ttft(cached) > SLO and predicted_ttft(other) <= SLO then pick = other end
        elseif last_cands[key] ~= c1 .. "|" .. c2 or not server_up(cached) then
            -- its candidates changed since (a server came up or went
            -- down: consistent hashing moves about 1/N of the keys) or its
            -- server is gone: the less loaded of its candidates now; a
            -- session placed with its prefix stays there otherwise
            pick = load_of(c2) < load_of(c1) and c2 or c1
        end
        if predicted_ttft(pick) > SLO then
            local g = least_loaded() -- a hotspot: the least loaded of all, if it helps
            if g and predicted_ttft(g) <= SLO then pick = g end
        end
    end
    if last_server[key] == nil then
        n_keys = n_keys + 1
        if n_keys > KEY_TABLE then last_server, last_cands, n_keys = {}, {}, 0 end
    end
    last_server[key] = pick
    last_cands[key] = c1 .. "|" .. c2
    return pick
end

local function poll(name)
    return function()
        local hc = core.httpclient()
        while true do
            local s = servers[name]
            s.at_poll = s.pending
            local ok, res = pcall(hc.get, hc, { url = "http://" .. s.addr .. "/load", timeout = 1000 })
            if ok and res and res.status == 200 and res.body then
                local r = tonumber(res.body:match('"running":(%d+)'))
                local w = tonumber(res.body:match('"waiting":(%d+)'))
                if r and w then
                    take_poll(s, r, w, tonumber(res.body:match('"ttft_recent_s":([%d%.eE+-]+)')) or s.ttft)
                end
            end
            core.msleep(POLL_MS)
        end
    end
end

core.register_init(function()
    local be = core.backends[BACKEND]
    if not be then
        core.Alert("kvloom.lua: no backend '" .. BACKEND .. "'")
        return
    end
    for nm, sv in pairs(be.servers) do
        servers[nm] = { name = nm, addr = sv:get_addr(), running = 0, waiting = 0, ttft = 0, pending = 0, at_poll = 0 }
        names[#names + 1] = nm
    end
    table.sort(names)
    build_rings()
    if POLICY == "dualmap" then
        for _, nm in ipairs(names) do core.register_task(poll(nm)) end
    end
end)

-- ---- the action --------------------------------------------------------

core.register_action("kvloom_route", { "http-req" }, function(txn)
    if txn.sf:method() ~= "POST" then return end
    local body = decode_body(txn.sf:req_body())
    local key
    if body then
        local k = body.prompt_cache_key
        if type(k) == "string" and k ~= "" then key = "k:" .. k end
        if not key and type(body.user) == "string" and body.user ~= "" then key = "u:" .. body.user end
    end
    if not key then
        local hv = txn.sf:req_hdr(SESSION_HEADER)
        if hv and hv ~= "" then key = "h:" .. hv end
    end
    local text
    if not key and body then
        text = conversation(body)
        if #text > 0 then key = "s:" .. session_of(text, txn.c) end
    end
    if not key then return end -- not a generation request we understand
    txn:set_var("txn.kvloom_key", key)
    if POLICY == "dualmap" then
        local prefix
        if last_server[key] == nil and body then -- a new session: its prefix's name
            text = text or conversation(body)
            if #text > 0 then prefix = chunk_hash(txn.c, text:sub(1, CHUNK), nil) end
        end
        local pick = dualmap(key, prefix)
        if pick then
            txn:set_var("txn.kvloom_srv", pick)
            servers[pick].pending = servers[pick].pending + 1
        end
    end
end, 0)

-- A routed request stops being pending when its answer starts (the
-- server's own counters, polled, hold a stream from then on). Without this,
-- pending counted every request routed since the poll, finished or not:
-- short requests sent one after another made an idle replica look as
-- loaded as one with six long generations, and new sessions went to the
-- hot one (deploy_test: 3 of 24 in a CI run).
core.register_action("kvloom_done", { "http-res" }, function(txn)
    local nm = txn:get_var("txn.kvloom_srv")
    local s = nm and servers[nm]
    if s and s.pending > 0 then
        s.pending = s.pending - 1
        if s.at_poll > s.pending then s.at_poll = s.pending end
    end
end, 0)
