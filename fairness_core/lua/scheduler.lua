-- fairctl scheduler: every decision and its effect in one atomic call.
--
-- Loaded into Redis once as a function library (fairness_core.library): the code below runs once,
-- at load, and each call runs only `call` at the end and what it calls. (Sent as a script, Redis
-- ran all of it on every call: defining the functions took 30 of a pop+ack's 88 µs.)
-- KEYS[1]: the group's config key. It routes the call to the group's slot; every other key is
--       built from the key base and shares its {hash tag} (same slot).
-- ARGV[1] operation, ARGV[2] key base ("{prefix}:"), ARGV[3] time override in ms ("" = Redis TIME),
-- ARGV[4..] op args.
--
-- Nothing Python defines is written here by hand; fairness_core.script.script_source compiles it in:
-- cfg (in place of __SETTINGS__) holds every value derived from the config, the fields of
-- fairness_core.settings.Settings; and each upper-case layout name is replaced by its value, a
-- literal constant in the code: the field separator of every stored line, the mark of a coded
-- name and the place of each letter of a code (CODE_MARK, CODE_PLACES), and the digits of an
-- enqueue time with each one's value (STAMP_DIGITS, STAMP_VALUES; fairness_core.jobs); ENV_<FIELD>, REC_<FIELD>
-- and DEAD_<FIELD>, the 1-based field positions of fairness_core.jobs' Envelope, Record and
-- DeadLetter (and ENV_HEAD, REC_HEAD, patterns capturing the fields read here); KEY_<NAME>, the
-- suffix of each group-wide key of fairness_core.keys.FIXED; and the per-class key layout and parts
-- of fairness_core.keys (CLASS_SPACE, PART_<NAME>, ...).
-- Compiled in, nothing is sent or decoded per call (decoding the config from JSON on every call
-- cost more than a fifth of a pop's time in Redis).
-- fairness_core/model.py implements exactly the same policy in Python; keep them in step.

-- The globals the code reads, as locals of the library: a library's global reads each go through
-- its globals table's metatable (about 0.03 µs a read, a hundred a pop+ack). A library cannot
-- reach them while it loads, so the first call sets them, from the globals of this function,
-- defined before the locals that shadow them. Until then `redis` is the loading API's (which
-- registers the functions).
local function runtime_globals() return redis, tonumber, tostring, string, math, table, unpack, pairs, ipairs, next end
local redis, tonumber, tostring, string, math, table, unpack, pairs, ipairs, next = redis
local bound = false

local cfg = __SETTINGS__
-- Set by `call` for each call: Redis runs one call at a time, and the functions below read them.
-- `incarnation`: when the group's state was created (the config hash's created_ms; '' for a group
-- an earlier release created), the token each lease carries.
local ARGV, op, base, now, now_s, incarnation
-- `now` as text, made once per call when first asked: whole ms, which "%d" writes for less than
-- tostring's "%.14g" does, in the same digits.
local function now_text()
  if now_s == nil then now_s = now % 1 == 0 and string.format('%d', now) or tostring(now) end
  return now_s
end
local K_STATS, K_SWRR, K_PAUSED, K_ARR, K_SEQ, K_LEASES, K_LEASED, K_DELAYED, K_DEAD, K_WORKERS, K_WSLOTS, K_CONFIG,
  K_CHARGED, K_RETURNED, K_REAPED
local NCLASS = #cfg.classes
-- The stats fields a pop reads: each class's queued and in-flight counts, then the worker slots.
local DEPTH_FIELDS, POP_FIELDS = {}, {}
for i = 1, NCLASS do
  DEPTH_FIELDS[i] = 'depth' .. SEP .. cfg.classes[i]
  POP_FIELDS[2 * i - 1], POP_FIELDS[2 * i] = DEPTH_FIELDS[i], 'inflight' .. SEP .. cfg.classes[i]
end
POP_FIELDS[2 * NCLASS + 1] = 'slots'
local NONE = {}  -- an empty table, never written
-- A pop's counts per class, filled anew by each (Redis runs one call at a time): no tables to build.
local DEPTH, INFLIGHT = {}, {}
local ALL = {}  -- every class index, true; never written
for i = 1, NCLASS do ALL[i] = true end

local function ckey(c, part) return base .. CLASS_SPACE .. c .. PART_SEP .. part end
-- The leases a worker holds (job id -> attempts), written when a pop names its worker: what goes
-- back to the queue at once when that worker unregisters or its registration lapses.
local function owned(w) return base .. OWNED_SPACE .. w end
local function tkey(c, tenant) return base .. CLASS_SPACE .. c .. PART_SEP .. TENANT_QUEUE .. tenant end

-- Integers as the text Redis would make of them. A number passed to redis.call is formatted by
-- Redis (snprintf "%.17g", about 0.5 µs an argument); a string goes as it is. Small ones are in a
-- table; other whole numbers below 2^53 (times, deadlines, tags) are made with "%d", the same
-- digits for less work; anything else is left to Redis.
local INTS = {}
for i = -64, 1024 do INTS[i] = '' .. i end  -- (tostring is not reachable while a library loads)
local WHOLE = 2 ^ 53
local function int(n)
  local text = INTS[n]
  if text == nil and n % 1 == 0 and n < WHOLE and n > -WHOLE then text = string.format('%d', n) end
  return text or n
end
-- And back: the number a reply's text (or an argument's) reads as, nil for none; a small integer's
-- from a table, as tonumber converts text with strtod, twice. Counts, attempts and most scores are.
local NUMS = {}
for i = -64, 1024 do NUMS[INTS[i]] = i end
local function number(v) return NUMS[v] or tonumber(v) end
local function num(v) return NUMS[v] or tonumber(v) or 0 end

-- The counters a call changes (field of the stats hash -> delta), written once per field when the
-- call ends (flush_stats): a pop+ack's in-flight count goes down for the ack and up for the pop,
-- which is no write at all. A read of the stats hash during the call adds what is pending (`stats_now`).
local pending = {}
local function stat(name, c, delta)
  local field = name .. SEP .. c
  pending[field] = (pending[field] or 0) + delta
end
-- What a call has done that doing again in the same call would not change (Redis runs one call at
-- a time, and nothing else reads or writes between): the classes whose wake member it set to 0,
-- whether it rolled the arrival buckets, the tier each party it queued for is charged as (class ..
-- SEP .. party -> tier, as the cost hash has it). Emptied as each call starts.
local woken, rolled, tiered = {}, false, {}

local function stats_now(fields)
  local raw = redis.call('HMGET', K_STATS, unpack(fields))
  for i = 1, #fields do raw[i] = num(raw[i]) + (pending[fields[i]] or 0) end
  return raw
end
local function flush_stats()
  for field, delta in pairs(pending) do
    if delta ~= 0 then redis.call('HINCRBY', K_STATS, field, int(delta)) end
    pending[field] = nil
  end
end

-- A cost an older release recorded in place of the tier (digits only), or nil.
local function recorded_cost(tier) return tier and string.match(tier, '^%d+$') and tonumber(tier) end

-- A job's virtual-time cost from its tenant's tier, at the applied config's costs: a tier removed
-- with a move is charged as the tier it moved to, and any other tier (none once apply has checked
-- the tiers in use) as the default tier.
local function cost_of(tier)
  return cfg.costs[tier] or cfg.costs[cfg.tier_moved[tier] or ''] or recorded_cost(tier) or cfg.default_cost
end

-- The leading fields of a stored line that `pattern` captures. What follows them (a payload, an
-- envelope, which may hold the separator) is not copied unless `rest` is asked for it: most reads
-- want only the fields (a pop reads two envelopes' and a lease record's).
local function fields(line, pattern) return {string.match(line, pattern)} end
-- What follows the fields `f` of `line` (as `fields` read them, before any is changed) and their separators.
local function rest(line, f)
  local len = #f
  for i = 1, #f do len = len + #f[i] end
  return string.sub(line, len + 1)
end

-- What an envelope stores for a name (fairness_core.config_store.Names): its code where the
-- group's names list holds it, else the name itself; and the name a stored field holds. A code's
-- place is a letter (fairness_core.jobs.code), or decimal digits as earlier releases wrote it.
local code_place = CODE_PLACES  -- letter -> place
local function coded(name) return cfg.codes[name] or name end
local function named(field)
  if string.sub(field, 1, 1) ~= CODE_MARK then return field end
  local place = string.sub(field, 2)
  return cfg.names[code_place[place] or tonumber(place)] or field
end

-- An envelope's enqueue time: ms in base 62 led by a letter (fairness_core.jobs.stamp), or the
-- decimal digits an earlier release stored, which lead with a digit.
local stamp_digits, stamp_value = STAMP_DIGITS, STAMP_VALUES  -- the digits; a digit's byte -> its value
-- Every pop reads one or two: seven digits (every time from 1971 to 2063) are read in one call.
local function stamp_ms(field)
  local a, b, c, d, e, f, g = string.byte(field, 1, 7)
  if a == nil or a <= 57 then return tonumber(field) end
  local v = stamp_value
  if #field == 7 then
    return (((((v[a] * 62 + v[b]) * 62 + v[c]) * 62 + v[d]) * 62 + v[e]) * 62 + v[f]) * 62 + v[g]
  end
  local ms = 0
  for i = 1, #field do ms = ms * 62 + v[string.byte(field, i)] end
  return ms
end
local function stamp(ms)
  local out = ''
  repeat
    local digit = ms % 62
    out = string.sub(stamp_digits, digit + 1, digit + 1) .. out
    ms = (ms - digit) / 62
  until ms == 0
  if string.byte(out, 1) <= 57 then out = 'A' .. out end
  return out
end

-- Attempts 0 is stored as nothing for a job never leased, and as '0' for one whose only attempt a
-- worker gave back (nack's unhandled): `fresh`, the last value, is true for the first, whose
-- lease counts its wait; the other's wait was counted when it was first leased.
local function header(env)
  local f = fields(env, ENV_HEAD)
  local att = f[ENV_ATTEMPTS]
  return f[ENV_ID], stamp_ms(f[ENV_ENQUEUED_MS]), att == '' and 0 or num(att), f[ENV_TIER], att == ''
end

local function with_attempts(env, attempts, given_back)
  local f = fields(env, ENV_HEAD)
  local tail = rest(env, f)
  f[ENV_ATTEMPTS] = (attempts > 0 or given_back) and int(attempts) or ''
  return table.concat(f, SEP) .. SEP .. tail
end

-- A lease record's fields, in their stored order (the pop reply sends them so). Built whole: a
-- table grown a field at a time is resized at each power of two.
local function record(c, tenant, att, env)
  return {[REC_QUEUE] = c, [REC_TENANT] = tenant, [REC_ATTEMPTS] = att, [REC_JOB] = env}
end

local function parse_record(rec)
  local f = fields(rec, REC_HEAD)
  return f[REC_QUEUE], f[REC_TENANT], number(f[REC_ATTEMPTS]), rest(rec, f)
end

-- The class's queued tenants of each tier ('tenants', class, tier in the stats hash): what a
-- sharded queue weighs a shard's turn by, so that each tenant's tier weight holds fleet-wide.
-- Never below 0: tenants queued by a release that kept no count are counted from their next turn.
local function count_tier(c, tier, delta)
  local field = 'tenants' .. SEP .. c .. SEP .. tier
  if redis.call('HINCRBY', K_STATS, field, delta) < 0 then redis.call('HSET', K_STATS, field, 0) end
end

-- Two-level fairness (tenants.account_separator, fairness_core.accounts): a class's tags, tiers
-- and tier counts are kept per party, the tenant's account, and each account keeps its queued
-- tenants' tags among themselves (akey). Without a separator every tenant is a party of its own.
local ACCOUNTS = cfg.account_sep ~= ''
local function account_of(tenant)
  local at = string.find(tenant, cfg.account_sep, 1, true)
  if at then return string.sub(tenant, 1, at - 1) end
  return tenant
end
local function party_of(tenant)
  if ACCOUNTS then return account_of(tenant) end
  return tenant
end
local function akey(c, account) return ckey(c, PART_ACCOUNT .. account) end

-- An account's jobs queued in the class, as the backlog counts a tenant's: what
-- tenants.account_max_queued and the exporter's noisy accounts read; the member goes at 0.
local function count_account(c, tenant, delta)
  local account = account_of(tenant)
  if number(redis.call('ZINCRBY', ckey(c, PART_ACCOUNT_BACKLOG), delta, account)) <= 0 then
    redis.call('ZREM', ckey(c, PART_ACCOUNT_BACKLOG), account)
  end
end

-- A hash of tiers keeps only the names off the default tier: `name` set to `tier` there.
local function put_tier(hash, name, tier)
  if tier == cfg.default_tier then
    redis.call('HDEL', hash, name)
  else
    redis.call('HSET', hash, name, tier)
  end
end
-- The party charged as `tier`, which it was charged as `was`. The cost hash holds only the queued
-- parties off the default tier: a queued party with no entry is of the default tier (most tenants,
-- so most enqueues write nothing there). Entries of the default tier, which earlier releases wrote,
-- read the same and go when their party leaves.
local function charge_as(c, party, was, tier)
  if was == tier then return end
  put_tier(ckey(c, PART_COST), party, tier)
  count_tier(c, was, -1)
  count_tier(c, tier, 1)
end
local function charged_as(c, party) return redis.call('HGET', ckey(c, PART_COST), party) or cfg.default_tier end

-- Without accounts a party, the tenant, is charged as its latest job's tier.
local function set_tier(c, party, tier)
  local seen = c .. SEP .. party
  if tiered[seen] == tier then return end  -- a batch's next job: the first set it
  tiered[seen] = tier
  charge_as(c, party, charged_as(c, party), tier)
end

-- With accounts each queued key is of its latest job's tier (PART_KEY_TIER holds the keys off the
-- default tier), each queued account counts its queued keys of each tier (tiers_key), and the
-- account is charged at the highest of them: one job changes only its own key's tier, so it cannot
-- lower its account while the account's other keys are queued.
local function tiers_key(c, account) return ckey(c, PART_ACCOUNT_TIERS .. account) end

-- Whether `tier` weighs more than `other` (costs less), or as much and sorts after it: the order
-- an account's highest tier is taken in, the same whatever order its keys came in.
local function outranks(tier, other)
  local a, b = cost_of(tier), cost_of(other)
  return a < b or (a == b and tier > other)
end

-- The account charged at the highest tier of its queued keys (kept as it is while none is counted).
local function charge_top(c, account)
  local counts, top = redis.call('HGETALL', tiers_key(c, account)), nil
  for k = 1, #counts, 2 do
    if top == nil or outranks(counts[k], top) then top = counts[k] end
  end
  if top then charge_as(c, account, charged_as(c, account), top) end
end

-- The account's queued keys of `tier`, none kept at 0; a key of the tier it is charged at leaving
-- it may lower it.
local function count_key(c, account, tier, delta)
  if redis.call('HINCRBY', tiers_key(c, account), tier, delta) > 0 then return end
  redis.call('HDEL', tiers_key(c, account), tier)
  if tier == charged_as(c, account) then charge_top(c, account) end
end

-- A queued key's latest job of `tier`: its own tier, its account's counts, and what the account
-- is charged at follow.
local function set_key_tier(c, tenant, tier)
  local seen = c .. SEP .. tenant
  if tiered[seen] == tier then return end  -- a batch's next job: the first set it
  tiered[seen] = tier
  local was = redis.call('HGET', ckey(c, PART_KEY_TIER), tenant) or cfg.default_tier
  if was == tier then return end
  put_tier(ckey(c, PART_KEY_TIER), tenant, tier)
  local account = account_of(tenant)
  redis.call('HINCRBY', tiers_key(c, account), tier, 1)
  count_key(c, account, was, -1)
  local now_as = charged_as(c, account)
  if outranks(tier, now_as) then charge_as(c, account, now_as, tier) end
end

-- ---------------------------------------------------------------- dispatch limits (holds)
-- tenants.max_in_flight and dispatch_rate, and their account forms, hold a tenant (or an account)
-- out of a class's fair order while it is at its cap or out of its rate's tokens: parked, never
-- scanned, its jobs queued where they are and its tier still counted. HK.held has each hold (class
-- SEP member -> until when in ms, +inf at a cap), HK.capped the classes each member is held in at
-- its cap (a job of it settling rejoins them), and the stats count the held members and their
-- queued jobs per class and reason. Every visit decides afresh: a hold is where a member waits,
-- never what lets it run, so a hold missed or released early costs a visit, not a limit.
-- Members: a tenant, or ACCOUNT_MARK .. account.
local HOLDS = cfg.holds
local TENANT_HOLDS = cfg.has_cap or cfg.has_pace
local ACCOUNT_HOLDS = ACCOUNTS and (cfg.account_cap > 0 or cfg.account_pace_us > 0)
local PACED = cfg.has_pace or cfg.account_pace_us > 0
local HK = {}  -- the hold keys of the call's group, set with the other keys
local ORDERED = {}  -- per pop: false for a class whose queued parties were all found held
local function is_account(member) return string.sub(member, 1, 1) == ACCOUNT_MARK end

-- Until when `member` is held in class c (ms, math.huge at its cap), or nil.
local function held_in(c, member) return number(redis.call('ZSCORE', HK.held, c .. SEP .. member)) end

local function hold_reason(member, due)
  return (is_account(member) and 'account_' or '') .. (due == math.huge and 'cap' or 'rate')
end

-- A member's jobs queued in class c: a tenant's, or all its account's keys'.
local function member_backlog(c, member)
  if is_account(member) then
    return num(redis.call('ZSCORE', ckey(c, PART_ACCOUNT_BACKLOG), string.sub(member, 2)))
  end
  return num(redis.call('ZSCORE', ckey(c, PART_BACKLOG), member))
end

-- The stats of holds: 'held' members and 'heldjobs' (their jobs queued now) per class and reason.
local function count_hold(c, member, due, sign)
  local why = c .. SEP .. hold_reason(member, due)
  stat('held', why, sign)
  stat('heldjobs', why, sign * member_backlog(c, member))
end

-- n jobs pushed to (positive) or taken from (negative) a tenant of class c count as held where
-- it, or its account, is held; `fresh`: the tenant had none queued, so cannot be held itself.
local function held_jobs(c, tenant, n, fresh)
  if TENANT_HOLDS and not fresh then
    local due = held_in(c, tenant)
    if due then stat('heldjobs', c .. SEP .. hold_reason(tenant, due), n) end
  end
  if ACCOUNT_HOLDS then
    local member = ACCOUNT_MARK .. account_of(tenant)
    local due = held_in(c, member)
    if due then stat('heldjobs', c .. SEP .. hold_reason(member, due), n) end
  end
end

-- The jobs `member` may start now under its cap and its rate (GCRA: `pace` µs a job, `burst` at
-- once; 0 for none), math.huge under neither; with none, until when it is held (math.huge: until
-- one of its jobs settles), and the rate's arrival time it read.
local function headroom(member, cap, pace, burst)
  local room = math.huge
  if cap > 0 then
    room = cap - num(redis.call('ZSCORE', HK.running, member))
    if room < 1 then return 0, math.huge end
  end
  if pace > 0 then
    local now_us, slack = now * 1000, (burst - 1) * pace
    local tat = math.max(num(redis.call('ZSCORE', HK.pace, member)), now_us)
    local tokens = math.floor((now_us + slack - tat) / pace) + 1
    if tokens < 1 then return 0, math.ceil((tat - slack) / 1000) end
    return math.min(room, tokens), nil, tat
  end
  return room
end

-- n jobs of `member` started: its rate's arrival time moves on by n paces.
local function pace_spent(member, pace, tat, n)
  if pace > 0 then redis.call('ZADD', HK.pace, tat + n * pace, member) end
end

-- A tenant's limits as `tier` (the tier its party is charged at): its override's, else its tier's,
-- else, for a tier the config no longer names, the default tier's.
local function limit_of(override, by_tier, tenant, tier)
  return override[tenant] or by_tier[tier] or by_tier[cfg.default_tier]
end

-- A party with new work joins its class at the class's current virtual time: no banked credit.
-- A tenant joining its account's other queued tenants joins at the lowest of their tags, its tier
-- counted among theirs.
local function activate(c, tenant, tier, enq)
  redis.call('ZADD', ckey(c, PART_HEADS), enq, tenant)
  tiered[c .. SEP .. tenant] = tier
  local party, inner = tenant, nil
  if ACCOUNTS then
    party = account_of(tenant)
    if tier ~= cfg.default_tier then redis.call('HSET', ckey(c, PART_KEY_TIER), tenant, tier) end
    redis.call('HINCRBY', tiers_key(c, party), tier, 1)
    local first = redis.call('ZRANGE', akey(c, party), 0, 0, 'WITHSCORES')
    inner = number(first[2])
    redis.call('ZADD', akey(c, party), inner or 0, tenant)
    -- An account already queued (with every key held, under dispatch limits, it is out of the
    -- order; with a key ready again it is back in it unless it is held itself): the new key's
    -- tier counts if it is the highest.
    local queued = inner or (HOLDS and redis.call('ZSCORE', ckey(c, PART_ACCOUNT_BACKLOG), party))
    if queued then
      local was = charged_as(c, party)
      if outranks(tier, was) then charge_as(c, party, was, tier) end
      if not inner and not held_in(c, ACCOUNT_MARK .. party) then
        redis.call('ZADD', ckey(c, PART_TAGS), 'NX', num(redis.call('GET', ckey(c, PART_VT))), party)
      end
      return
    end
  end
  redis.call('ZADD', ckey(c, PART_TAGS), num(redis.call('GET', ckey(c, PART_VT))), party)
  if tier ~= cfg.default_tier then redis.call('HSET', ckey(c, PART_COST), party, tier) end
  count_tier(c, tier, 1)
end

-- A removed class's jobs coming back (a reaped lease, a retry, a requeued dead letter) go where
-- the applied config moved that class; with no move they stay where they were, and show.
local function served_by(c) return cfg.moved[c] or c end

-- ---------------------------------------------------------------- charging by runtime
-- Under scheduler.charge: runtime a job is charged the worker time it takes (µs): an estimate at
-- the pop, corrected to the measured runtime at the ack. Estimates are moving averages per tenant
-- and task (kept while the tenant has jobs queued or leased in the class) and per task in the
-- class (the seed of a tenant's first job of the task), else the class's configured seed.

local function task_of(env) return named(({string.match(env, ENV_TASK_HEAD)})[ENV_TASK]) end

local function tenant_estimates(c, tenant) return ckey(c, PART_TENANT_ESTIMATE .. tenant) end

-- The charges (µs, at least the minimum) of `items`, a tenant's jobs of class index ci.
local function estimates(ci, tenant, items)
  local c, tasks = cfg.classes[ci], {}
  for k, env in ipairs(items) do tasks[k] = task_of(env) end
  local own = redis.call('HMGET', tenant_estimates(c, tenant), unpack(tasks))
  local class = nil
  local out = {}
  for k = 1, #tasks do
    local est = tonumber(own[k])
    if est == nil then
      class = class or redis.call('HMGET', ckey(c, PART_ESTIMATE), unpack(tasks))
      est = tonumber(class[k]) or cfg.seed_us[ci]
    end
    out[k] = math.max(est, cfg.min_charge_us)
  end
  return out
end

-- Record what the pop charged each job (by id), so its ack corrects by the difference; returns the total.
local function record_charges(items, charges)
  local rows, work = {}, 0
  for k, env in ipairs(items) do
    rows[#rows + 1] = header(env)
    rows[#rows + 1] = charges[k]
    work = work + charges[k]
  end
  redis.call('HSET', K_CHARGED, unpack(rows))
  return work
end

-- A tenant with no job queued or leased in a class leaves it: its estimates go (memory stays
-- bounded by the tenants at work), and it comes back seeded from the class's.
local function forget(c, tenant)
  if not redis.call('ZSCORE', ckey(c, PART_BACKLOG), tenant) and not redis.call('ZSCORE', ckey(c, PART_INFLIGHT), tenant) then
    redis.call('DEL', tenant_estimates(c, tenant))
  end
end

-- Smooth weighted round-robin's current value per class, in class order (and the values as
-- stored), and back: only the values that changed are written. One table, filled anew by each load
-- (a call loads it at most once at a time).
local SWRR = {}
local function load_swrr()
  local cur = redis.call('HMGET', K_SWRR, unpack(cfg.classes))
  for i = 1, NCLASS do SWRR[i] = num(cur[i]) end
  return SWRR, cur
end

local function save_swrr(swrr, stored)
  local args = {}
  for i = 1, NCLASS do
    if swrr[i] ~= number(stored[i]) then
      args[#args + 1] = cfg.classes[i]
      args[#args + 1] = int(swrr[i])
    end
  end
  if #args > 0 then redis.call('HSET', K_SWRR, unpack(args)) end
end

-- Shift class shares of worker time by `fixes` (class -> µs more than charged): the class pays it
-- in smooth weighted round-robin as a pop of that size would, against the classes contending now
-- (queued jobs, not paused). A class no config names is not charged.
local function correct_classes(fixes, order)
  local index = {}
  for i = 1, NCLASS do index[cfg.classes[i]] = i end
  local depth = stats_now(DEPTH_FIELDS)
  local paused = {}
  for _, name in ipairs(redis.call('SMEMBERS', K_PAUSED)) do paused[name] = true end
  local swrr, stored = load_swrr()
  for _, c in ipairs(order) do
    local ci, fix = index[c], fixes[c]
    if ci and fix ~= 0 then
      local total = 0
      for i = 1, NCLASS do
        if i == ci or (depth[i] > 0 and not paused[cfg.classes[i]]) then
          total = total + cfg.weights[i]
          swrr[i] = swrr[i] + cfg.weights[i] * fix
        end
      end
      swrr[ci] = swrr[ci] - total * fix
    end
  end
  save_swrr(swrr, stored)
end

-- Wake an idle worker blocked on the class (BZPOPMIN on its wake key): `at` 0 when the class may
-- have work to take now, else when (ms) a retry of it comes due. One member, lowest time kept:
-- a burst of enqueues is one wake-up, and each pop that leaves work behind arms the next.
local function wake(c, at)
  if woken[c] then return end  -- at 0 already in this call: a ZADD LT changes nothing (a batch's pushes)
  redis.call('ZADD', ckey(c, PART_WAKE), 'LT', int(at), WAKE_MEMBER)
  if at == 0 then woken[c] = true end
end

-- Hold `member` out of class c's fair order until `due` (ms; math.huge: until a job of it settles).
local function park(c, member, due)
  local key = c .. SEP .. member
  local was = held_in(c, member)
  if was then count_hold(c, member, was, -1) end  -- held already, and back in the order since
  redis.call('ZADD', HK.held, due == math.huge and '+inf' or int(due), key)
  count_hold(c, member, due, 1)
  if due == math.huge then
    local classes = redis.call('HGET', HK.capped, member)
    if not classes then
      redis.call('HSET', HK.capped, member, c)
    elseif not string.find(SEP .. classes .. SEP, SEP .. c .. SEP, 1, true) then
      redis.call('HSET', HK.capped, member, classes .. SEP .. c)
    end
  else
    wake(c, due)
  end
  if is_account(member) then
    redis.call('ZREM', ckey(c, PART_TAGS), string.sub(member, 2))
  elseif ACCOUNTS then
    local account = account_of(member)
    redis.call('ZREM', akey(c, account), member)
    if redis.call('EXISTS', akey(c, account)) == 0 then redis.call('ZREM', ckey(c, PART_TAGS), account) end
  else
    redis.call('ZREM', ckey(c, PART_TAGS), member)
  end
end

-- Back into class c's fair order at its virtual time, as a party with new work joins (no credit
-- banked while held), if it has jobs queued there; a key of a held account rejoins its account only.
local function rejoin(c, member)
  local party = member
  if is_account(member) then
    party = string.sub(member, 2)
    if redis.call('EXISTS', akey(c, party)) == 0 then return end
  else
    if not redis.call('ZSCORE', ckey(c, PART_BACKLOG), member) then return end
    if ACCOUNTS then
      party = account_of(member)
      local first = redis.call('ZRANGE', akey(c, party), 0, 0, 'WITHSCORES')
      redis.call('ZADD', akey(c, party), 'NX', number(first[2]) or 0, member)
      if held_in(c, ACCOUNT_MARK .. party) then return end
    end
  end
  redis.call('ZADD', ckey(c, PART_TAGS), 'NX', num(redis.call('GET', ckey(c, PART_VT))), party)
  wake(c, 0)
end

-- End `member`'s hold in class c, if it has one, and bring it back into the order.
local function unhold(c, member)
  local due = held_in(c, member)
  if not due then return end
  count_hold(c, member, due, -1)
  redis.call('ZREM', HK.held, c .. SEP .. member)
  rejoin(c, member)
end

-- n leases of `member` more (or fewer, n negative), all classes together; a member held at its
-- cap rejoins every class it is held in as one of its jobs settles. `least`: the lowest cap it can
-- have; a member that ran fewer cannot have been held at one, and no hold is looked for.
local function count_running(member, n, least)
  if n > 0 then
    redis.call('ZINCRBY', HK.running, int(n), member)
    return
  end
  -- Read first, as release_inflight does: the usual release takes the last.
  local had = num(redis.call('ZSCORE', HK.running, member))
  if had + n <= 0 then
    redis.call('ZREM', HK.running, member)
  else
    redis.call('ZINCRBY', HK.running, int(n), member)
  end
  if had >= least then
    local classes = redis.call('HGET', HK.capped, member)
    if classes then
      redis.call('HDEL', HK.capped, member)
      for c in string.gmatch(classes, '[^' .. SEP .. ']+') do unhold(c, member) end
    end
  end
end

local function leases_counted(tenant, n)
  if cfg.has_cap then count_running(tenant, n, cfg.least_cap) end
  if ACCOUNTS and cfg.account_cap > 0 then count_running(ACCOUNT_MARK .. account_of(tenant), n, cfg.account_cap) end
end

local HELD_KEY = '^([^' .. SEP .. ']*)' .. SEP .. '(.*)$'
-- End up to `limit` holds of rates whose next token is due (a pop's first step).
local function release_holds(limit)
  for _, key in ipairs(redis.call('ZRANGEBYSCORE', HK.held, '-inf', now_text(), 'LIMIT', '0', int(limit))) do
    unhold(string.match(key, HELD_KEY))
  end
end

local function push_tail(c, tenant, tier, env, enq)
  c = served_by(c)
  local fresh = redis.call('RPUSH', tkey(c, tenant), env) == 1
  if fresh then
    activate(c, tenant, tier, enq)
  elseif ACCOUNTS then
    set_key_tier(c, tenant, tier)
  else
    set_tier(c, tenant, tier)
  end
  if HOLDS then held_jobs(c, tenant, 1, fresh) end
  redis.call('ZINCRBY', ckey(c, PART_BACKLOG), 1, tenant)
  if ACCOUNTS then count_account(c, tenant, 1) end
  stat('depth', c, 1)
  wake(c, 0)
end

-- Redelivered, retried and promoted jobs go to the head of their tenant's sub-queue.
local function push_head(c, tenant, env)
  c = served_by(c)
  local _, enq, _, tier = header(env)
  local fresh = redis.call('LPUSH', tkey(c, tenant), env) == 1
  if fresh then
    activate(c, tenant, named(tier), enq)
  else
    redis.call('ZADD', ckey(c, PART_HEADS), 'LT', enq, tenant)
  end
  if HOLDS then held_jobs(c, tenant, 1, fresh) end
  redis.call('ZINCRBY', ckey(c, PART_BACKLOG), 1, tenant)
  if ACCOUNTS then count_account(c, tenant, 1) end
  stat('depth', c, 1)
  wake(c, 0)
end

-- Pop n jobs from the head of a tenant's sub-queue (the tail, youngest first, with from_tail),
-- keeping tags/heads/backlog in step. The backlog's count is the sub-queue's length (every push
-- and take changes both), so its new value says what is left without an LLEN.
local function take(c, tenant, n, from_tail)
  local qk = tkey(c, tenant)
  local items = redis.call(from_tail and 'RPOP' or 'LPOP', qk, int(n))
  local left = number(redis.call('ZINCRBY', ckey(c, PART_BACKLOG), int(-#items), tenant))
  if ACCOUNTS then count_account(c, tenant, -#items) end
  if left <= 0 then
    left = 0
    redis.call('ZREM', ckey(c, PART_HEADS), tenant)
    redis.call('ZREM', ckey(c, PART_BACKLOG), tenant)
    local party = tenant
    tiered[c .. SEP .. tenant] = nil
    if ACCOUNTS then
      party = account_of(tenant)
      redis.call('ZREM', akey(c, party), tenant)
      local tier = redis.call('HGET', ckey(c, PART_KEY_TIER), tenant)
      if tier then redis.call('HDEL', ckey(c, PART_KEY_TIER), tenant) end
      local stays = redis.call('EXISTS', akey(c, party)) == 1  -- the account has other tenants queued
      if not stays and HOLDS and redis.call('ZSCORE', ckey(c, PART_ACCOUNT_BACKLOG), party) then
        redis.call('ZREM', ckey(c, PART_TAGS), party)  -- and every one of them held: out of the order
        stays = true
      end
      if stays then
        count_key(c, party, tier or cfg.default_tier, -1)
        party = nil
      else
        redis.call('DEL', tiers_key(c, party))
      end
    end
    if party then
      redis.call('ZREM', ckey(c, PART_TAGS), party)
      local was = redis.call('HGET', ckey(c, PART_COST), party)
      if was then redis.call('HDEL', ckey(c, PART_COST), party) end
      count_tier(c, was or cfg.default_tier, -1)
    end
  else
    if not from_tail then
      local _, enq = header(redis.call('LINDEX', qk, '0'))
      redis.call('ZADD', ckey(c, PART_HEADS), int(enq), tenant)
    end
  end
  stat('depth', c, -#items)
  return items, left
end

-- 'dead' counts every job ever dead-lettered (jobs_dead_lettered_total); 'deadlist' counts those
-- of the class still in the dead-letter list (requeue and drop take them off).
local function dead_letter(c, tenant, attempts, env, err)
  local f = {}
  f[DEAD_QUEUE], f[DEAD_TENANT], f[DEAD_ATTEMPTS], f[DEAD_DEAD_MS], f[DEAD_ERROR], f[DEAD_JOB] =
    c, tenant, attempts, now, err, env
  redis.call('RPUSH', K_DEAD, table.concat(f, SEP))
  stat('dead', c, 1)
  stat('deadlist', c, 1)
end

-- Move up to `limit` retries whose backoff has passed back to the head of their sub-queue; how many.
local function release_delayed(limit)
  local due = redis.call('ZRANGEBYSCORE', K_DELAYED, '-inf', now_text(), 'LIMIT', '0', int(limit))
  for _, rec in ipairs(due) do
    redis.call('ZREM', K_DELAYED, rec)
    local c, tenant, att, env = parse_record(rec)
    stat('delayed', c, -1)
    push_head(c, tenant, env)
  end
  return #due
end

-- Classes the stats hash has counted jobs for that the applied config does not name (sorted), and
-- how many jobs each holds now (queued, leased or waiting to retry): read from the counters every
-- script keeps, never by a scan.
local function unconfigured(stats)
  local known = {}
  for i = 1, NCLASS do known[cfg.classes[i]] = true end
  local held, names = {}, {}
  for i = 1, #stats, 2 do
    local name, c = string.match(stats[i], '^(%l+)' .. SEP .. '(.*)$')
    if (name == 'depth' or name == 'inflight' or name == 'delayed') and not known[c] then
      if held[c] == nil then
        held[c] = 0
        names[#names + 1] = c
      end
      held[c] = held[c] + tonumber(stats[i + 1])
    end
  end
  table.sort(names)
  return names, held
end

-- ---------------------------------------------------------------- priority budget (arrivals)

local function roll_arrivals(window)
  local bucket = math.floor(now / window)
  if rolled then return (now - bucket * window) end
  rolled = true
  local stored = tonumber(redis.call('HGET', K_ARR, 'bucket'))
  if stored ~= bucket then
    local names = {'*'}
    for i = 1, NCLASS do names[#names + 1] = cfg.classes[i] end
    for _, name in ipairs(names) do
      local prev = 0
      if stored == bucket - 1 then prev = num(redis.call('HGET', K_ARR, 'cur' .. SEP .. name)) end
      redis.call('HSET', K_ARR, 'prev' .. SEP .. name, prev, 'cur' .. SEP .. name, 0)
    end
    redis.call('HSET', K_ARR, 'bucket', bucket)
  end
  return (now - bucket * window)
end

-- This call's arrivals (field of the arrivals hash -> count), written once per field when the call
-- ends, as the stats are: a batch's jobs count one by one here, and each estimate adds them.
local arrived = {}
local function flush_arrivals()
  for field, n in pairs(arrived) do
    redis.call('HINCRBY', K_ARR, field, int(n))
    arrived[field] = nil
  end
end

-- Sliding-window estimate of arrivals: the previous bucket weighted by how much of it is in the window.
local function estimate(name, window, offset)
  local cur = 'cur' .. SEP .. name
  local v = redis.call('HMGET', K_ARR, 'prev' .. SEP .. name, cur)
  return num(v[1]) * (window - offset) / window + num(v[2]) + (arrived[cur] or 0)
end

local function apply_budget(ci, reason)
  if not cfg.has_budget then return ci, reason end
  local window = cfg.budget_window_ms
  local offset = roll_arrivals(window)
  local budget = cfg.budgets[ci]
  if budget > 0 then
    local total = estimate('*', window, offset) + 1
    local mine = estimate(cfg.classes[ci], window, offset) + 1
    if total >= cfg.budget_min and mine / total > budget then
      if cfg.budget_action == 'reject' then
        stat('rejected', cfg.classes[ci], 1)
        return nil, reason
      end
      stat('demoted', cfg.classes[ci], 1)
      ci, reason = ci + 1, cfg.over_budget_reason
    end
  end
  local all, mine = 'cur' .. SEP .. '*', 'cur' .. SEP .. cfg.classes[ci]
  arrived[all], arrived[mine] = (arrived[all] or 0) + 1, (arrived[mine] or 0) + 1
  return ci, reason
end

-- ---------------------------------------------------------------- admission (tenant limits)

-- The queued-jobs limit a tenant enqueueing as `tier` is at (nil when below it or unlimited): its
-- jobs queued in every class, read from the backlog counts pushes and pops keep, one ZSCORE per
-- class. Leased and retrying jobs are not queued: a pop makes room.
-- A tenant's (PART_BACKLOG) or an account's (PART_ACCOUNT_BACKLOG) jobs queued in every class.
local function queued_in_classes(part, member)
  local queued = 0
  for i = 1, NCLASS do queued = queued + num(redis.call('ZSCORE', ckey(cfg.classes[i], part), member)) end
  return queued
end

-- On a sharded queue, what the tenant's limits count on the other shards of its hand (an enqueue's
-- argument, '' for none: fairness_core.admission): its queued jobs, its account's, and the two rate
-- estimates', added to this shard's own.
local elsewhere = {0, 0, 0, 0}
local function held_elsewhere(arg)
  elsewhere = {0, 0, 0, 0}
  local i = 1
  for v in string.gmatch(arg, '[^,]+') do elsewhere[i], i = tonumber(v), i + 1 end
end

local function at_limit(tenant, tier)
  local limit = cfg.max_queued[tier] or 0
  if limit == 0 then return nil end
  if queued_in_classes(PART_BACKLOG, tenant) + elsewhere[1] >= limit then return limit end
  return nil
end

-- The arrival-rate limit (jobs per second) a tenant enqueueing as `tier` is over, or nil: as the
-- budget estimates arrivals, its accepted jobs in the current rate-window bucket plus the previous
-- bucket's weighted by the part of it still in the window, held to the rate times the window.
local function rate_estimate(field)
  local window = cfg.rate_window_ms
  local bucket = math.floor(now / window)
  local prev = num(redis.call('HGET', base .. RATE_SPACE .. (bucket - 1), field))
  local cur = num(redis.call('HGET', base .. RATE_SPACE .. bucket, field))
  return prev * (window - (now - bucket * window)) / window + cur
end

local function over_rate(tenant, tier)
  local allowed = cfg.rate_allowed[tier] or 0
  if allowed == 0 or rate_estimate(tenant) + elsewhere[3] < allowed then return nil end
  return cfg.max_rate[tier]
end

-- Count an accepted job in its tenant's rate bucket (`field`: the tenant, or an account's field).
-- A bucket's first job gives it three windows to live and drops the bucket two before it, which no
-- estimate reads any more: UNLINK frees a hash of many tenants off Redis's main thread, where its
-- expiry would free it on it (milliseconds for 100,000 fields, every command waiting). The TTL is
-- left for when the jobs stop.
local function count_rate(field)
  local bucket = math.floor(now / cfg.rate_window_ms)
  local key = base .. RATE_SPACE .. bucket
  if redis.call('HINCRBY', key, field, 1) == 1
      and redis.call('PEXPIRE', key, int(3 * cfg.rate_window_ms), 'NX') == 1 then
    redis.call('UNLINK', base .. RATE_SPACE .. (bucket - 2))
  end
end

-- ---------------------------------------------------------------- operations

local ops = {}

-- A keyed job's record (DEDUP_SPACE .. key): when the key stops naming the job (ms), its id, class
-- and reason. The record expires then too, so keys take memory for one window only.
local DEDUP_RECORD = '^(%d+)' .. SEP .. '([^' .. SEP .. ']*)' .. SEP .. '([^' .. SEP .. ']*)' .. SEP .. '(.*)$'

-- One job: class index (1-based), tenant, tier, task, reason, payload, and its key (nil: none).
-- Returns {id, class, reason}; a budget rejection has the id ''; a refusal at a tenant limit has the
-- id '' and the limit's name and value (a rate as a string, jobs per second) after the reason. A
-- key that names a job (one accepted with it within scheduler.dedup_window) returns that job, and
-- nothing else is done but counting it: a producer's retry is not a second job. The queued-jobs
-- limit is checked next, then the rate, then the budget; only an accepted job is an arrival for
-- either the rate or the budget, and only an accepted job's key is recorded.
local function enqueue_one(asked, tenant, tier, task, asked_reason, payload, key)
  if key then
    local till, first, queue, why = string.match(redis.call('GET', base .. DEDUP_SPACE .. key) or '', DEDUP_RECORD)
    if till and tonumber(till) > now then
      stat('deduplicated', queue, 1)
      return {first, queue, why}
    end
  end
  local account_rate = cfg.account_rate_allowed > 0 and ACCOUNT_MARK .. account_of(tenant)
  if cfg.has_limit then
    local limit = at_limit(tenant, tier)
    if limit then
      stat('refused', cfg.classes[asked], 1)
      return {'', cfg.classes[asked], asked_reason, 'max_queued', limit}
    end
    if cfg.account_max_queued > 0 and queued_in_classes(PART_ACCOUNT_BACKLOG, account_of(tenant)) + elsewhere[2]
        >= cfg.account_max_queued then
      stat('refused', cfg.classes[asked], 1)
      return {'', cfg.classes[asked], asked_reason, 'account_max_queued', cfg.account_max_queued}
    end
  end
  if cfg.has_rate then
    local rate = over_rate(tenant, tier)
    if rate then
      stat('refused', cfg.classes[asked], 1)
      return {'', cfg.classes[asked], asked_reason, 'max_rate', tostring(rate)}
    end
    if account_rate and rate_estimate(account_rate) + elsewhere[4] >= cfg.account_rate_allowed then
      stat('refused', cfg.classes[asked], 1)
      return {'', cfg.classes[asked], asked_reason, 'account_max_rate', tostring(cfg.account_max_rate)}
    end
  end
  local ci, reason = apply_budget(asked, asked_reason)
  if ci == nil then return {'', cfg.classes[asked], reason} end
  if cfg.has_rate then
    count_rate(tenant)
    if account_rate then count_rate(account_rate) end
  end
  local c = cfg.classes[ci]
  local id = redis.call('INCR', K_SEQ)
  local e = {}
  e[ENV_ID], e[ENV_ENQUEUED_MS], e[ENV_ATTEMPTS], e[ENV_TIER], e[ENV_TASK], e[ENV_REASON], e[ENV_PAYLOAD] =
    id, stamp(now), '', coded(tier), coded(task), coded(reason), payload
  local env = table.concat(e, SEP)
  push_tail(c, tenant, tier, env, now)
  stat('enq', c .. SEP .. reason, 1)
  if key then
    local window = cfg.dedup_window_ms
    redis.call('SET', base .. DEDUP_SPACE .. key, int(now + window) .. SEP .. id .. SEP .. c .. SEP .. reason,
      'PX', int(window))
  end
  return {tostring(id), c, reason}
end

-- ARGV[4..8]: enqueue_one's arguments but the payload, ARGV[9]: the tenant's counts elsewhere
-- (held_elsewhere), ARGV[10]: the payload, ARGV[11]: the job's key (absent: none).
function ops.enqueue()
  held_elsewhere(ARGV[9])
  return enqueue_one(tonumber(ARGV[4]), ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[10], ARGV[11])
end

-- ARGV[4..9]: as enqueue's, then one payload per job: a batch of one tenant's jobs of one task in
-- one call, each decided in turn exactly as its own enqueue would be (admission, budget, id,
-- order). One reply per job, as enqueue's. The call's fixed work (the config check, the clock, the
-- counters' writes) is paid once, not once a job.
function ops.enqueue_many()
  local asked, tenant, tier, task, reason = tonumber(ARGV[4]), ARGV[5], ARGV[6], ARGV[7], ARGV[8]
  held_elsewhere(ARGV[9])
  local out = {}
  for i = 10, #ARGV do out[i - 9] = enqueue_one(asked, tenant, tier, task, reason, ARGV[i]) end
  return out
end

-- As enqueue_many, with a key and a payload per job after ARGV[9].
function ops.enqueue_keyed_many()
  local asked, tenant, tier, task, reason = tonumber(ARGV[4]), ARGV[5], ARGV[6], ARGV[7], ARGV[8]
  held_elsewhere(ARGV[9])
  local out = {}
  for i = 10, #ARGV, 2 do out[#out + 1] = enqueue_one(asked, tenant, tier, task, reason, ARGV[i + 1], ARGV[i]) end
  return out
end

local function wait_bucket(wait)
  local edges = cfg.buckets_ms
  for i = 1, #edges do
    if wait <= edges[i] then return i end
  end
  return #edges + 1
end

-- Lease popped envelopes: deadlines in the lease set, records in the leased hash, first-attempt
-- waits in the histogram; one call per structure for the whole visit, not one per job.
local function lease(c, tenant, items, out, owner)
  local deadline = int(now + cfg.visibility_ms)
  local deadlines, records, buckets, waited, first = {}, {}, {}, 0, 0
  local mine = owner and {}
  for _, env in ipairs(items) do
    local id, enq, att, _, fresh = header(env)
    att = att + 1
    deadlines[#deadlines + 1] = deadline
    deadlines[#deadlines + 1] = id
    local rec = record(c, tenant, int(att), env)
    records[#records + 1] = id
    records[#records + 1] = table.concat(rec, SEP)
    rec[REC_ATTEMPTS] = att  -- a number in the reply
    if mine then
      mine[#mine + 1] = int(att)
      mine[#mine + 1] = id
    end
    if fresh then
      local idx = wait_bucket(now - enq)
      buckets[idx] = (buckets[idx] or 0) + 1
      waited, first = waited + now - enq, first + 1  -- the count is the buckets' sum
    end
    out[#out + 1] = rec
  end
  redis.call('ZADD', K_LEASES, unpack(deadlines))
  redis.call('HSET', K_LEASED, unpack(records))
  if mine then redis.call('ZADD', owned(owner), unpack(mine)) end
  for idx, n in pairs(buckets) do stat('wb', c .. SEP .. INTS[idx], n) end
  if first > 0 then stat('ws', c, waited) end
  stat('inflight', c, #items)
  redis.call('ZINCRBY', ckey(c, PART_INFLIGHT), int(#items), tenant)
  if HOLDS then leases_counted(tenant, #items) end
end

-- Whether a lease's token names the group's state now ('' checks none). A lease made in a state
-- since lost (Redis came back empty) names another: its ack, nack, heartbeat or give-back is
-- refused as stale and touches nothing, as the new state's jobs take ids from 1 again.
local function in_state(token) return token == '' or token == incarnation end

-- Look up a live lease; a lease whose job was reaped (or redelivered since) is stale.
local function held(id, attempts)
  local rec = redis.call('HGET', K_LEASED, id)
  if not rec then return nil end
  local c, tenant, att, env = parse_record(rec)
  if att ~= attempts then return nil end
  return c, tenant, att, env
end

-- Take n off a tenant's in-flight count (the member goes when it reaches zero). Read first: the
-- usual release takes the last (ZSCORE and ZREM cost less than ZINCRBY, whose reply is a formatted double).
local function release_inflight(c, tenant, n)
  stat('inflight', c, -n)
  if HOLDS then leases_counted(tenant, -n) end
  local key = ckey(c, PART_INFLIGHT)
  if num(redis.call('ZSCORE', key, tenant)) <= n then
    redis.call('ZREM', key, tenant)
    if cfg.runtime then forget(c, tenant) end
  else
    redis.call('ZINCRBY', key, int(-n), tenant)
  end
end

local function release_lease(id, c, tenant)
  redis.call('HDEL', K_LEASED, id)
  redis.call('ZREM', K_LEASES, id)
  if cfg.runtime then redis.call('HDEL', K_CHARGED, id) end
  release_inflight(c, tenant, 1)
end

-- A lease its worker never started (or could not: no handler) goes back to the head of its
-- tenant's sub-queue at once, with its attempt given back: it cost nothing, so max_attempts never
-- dead-letters it for that. Its wait was counted when it was first leased.
local function give_back(id, c, tenant, att, env)
  release_lease(id, c, tenant)
  push_head(c, tenant, with_attempts(env, math.max(att - 1, 0), true))
end

-- A lease taken back from its worker (expired, or the worker stopped or lapsed with it unsettled):
-- the job may have run, so the attempt counts; it goes back to the head of its sub-queue, or to
-- the dead letters after max_attempts deliveries. Remembered a while (RETURNED_KEEP_MS), so that a
-- late ack or heartbeat of it can say that it may run again, and another that it was settled.
local function take_back(id, c, tenant, att, env, why)
  release_lease(id, c, tenant)
  redis.call('ZADD', K_RETURNED, now_text(), id)
  if att >= cfg.max_attempts then
    dead_letter(c, tenant, att, env, why)
  else
    push_head(c, tenant, with_attempts(env, att))
    stat('redelivered', c, 1)
  end
end

-- A worker gone (unregistered, or its registration lapsed): every lease it still holds goes back
-- now, not when its deadline passes, and its slots stop counting. How many leases went back.
local function drop_worker(w, why)
  local slots = num(redis.call('HGET', K_WSLOTS, w))
  if slots ~= 0 then
    redis.call('HINCRBY', K_STATS, 'slots', int(-slots))
    redis.call('HDEL', K_WSLOTS, w)
  end
  redis.call('ZREM', K_WORKERS, w)
  local mine = redis.call('ZRANGE', owned(w), '0', '-1', 'WITHSCORES')
  local count = 0
  for i = 1, #mine, 2 do
    local c, tenant, att, env = held(mine[i], number(mine[i + 1]))
    if c then
      take_back(mine[i], c, tenant, att, env, why)
      count = count + 1
    end
  end
  if #mine > 0 then redis.call('DEL', owned(w)) end
  return count
end

-- The current window bucket's keys of each class ({bucket, served, total, by account}), kept while
-- the bucket and the key base last seen last (a number made text costs a formatting each time).
local window_keys, window_base = {}, nil
-- A window bucket's keys of class c: served, total, and by account (false without accounts).
local function bucket_keys(c, bucket)
  return ckey(c, PART_SERVED .. bucket), ckey(c, PART_SERVED_TOTAL .. bucket),
    ACCOUNTS and ckey(c, PART_ACCOUNT_SERVED .. bucket)
end
local function window_of(c)
  local bucket = math.floor(now / cfg.window_ms)
  if window_base ~= base then window_keys, window_base = {}, base end
  local w = window_keys[c]
  if w == nil or w[1] ~= bucket then
    w = {bucket, bucket_keys(c, bucket)}
    window_keys[c] = w
  end
  return w
end

-- Complete n jobs of a tenant. Windowed service: one sorted set per window-long bucket (the
-- exporter reads the current and the previous one). A bucket's first write gives its keys three
-- windows to live and drops those of the bucket two before it, as count_rate does its buckets: a
-- set of every tenant served in a window, expiring, would block Redis while it is freed. No
-- cumulative count per tenant: every tenant is counted the same way, whenever it came, and the
-- exporter names the heaviest of the window, not the first ever seen.
local function count_processed(c, tenant, n, units)
  release_inflight(c, tenant, n)
  stat('processed', c, n)
  local w = window_of(c)
  local served, total, by_account = w[2], w[3], w[4]
  local by = int(units)
  redis.call('ZINCRBY', served, by, tenant)
  if by_account then redis.call('ZINCRBY', by_account, by, account_of(tenant)) end
  if redis.call('INCRBY', total, by) == units then
    local ttl = int(3 * cfg.window_ms)
    local old_served, old_total, old_by_account = bucket_keys(c, w[1] - 2)
    redis.call('PEXPIRE', served, ttl)
    redis.call('PEXPIRE', total, ttl)
    redis.call('UNLINK', old_served, old_total)
    if by_account then
      redis.call('PEXPIRE', by_account, ttl)
      redis.call('UNLINK', old_by_account)
    end
  end
end

-- The work of the jobs settled in one call (runtimes in µs), applied once by finish_work: worker
-- time per class, charge corrections per class and per tenant, estimate updates.
local function new_work()
  if not cfg.runtime then return {classes = {}, time = {}, fixes = {}} end
  return {classes = {}, time = {}, fixes = {}, tenants = {}, tenant_fix = {}, keys = {}, est = {}}
end

-- A measured runtime moves an estimate (key, task) by the smoothing weight; the first one sets it.
local function learn(w, key, task, ran)
  local ests = w.est[key]
  if ests == nil then
    ests = {}
    w.est[key] = ests
    w.keys[#w.keys + 1] = key
  end
  local old = ests[task] or tonumber(redis.call('HGET', key, task))
  ests[task] = old and math.floor(old + (ran - old) * cfg.smoothing + 0.5) or ran
end

-- A settled job of class c and tenant that ran `ran` µs (nil: not reported), charged `charged` µs
-- at its pop (nil: none recorded); `learning`: an ack (a failure's runtime says little of the
-- task's). Returns what it counts as served: 1 job, or under runtime its runtime (else its charge).
local function ran_for(w, c, tenant, env, ran, charged, learning)
  if ran then
    if w.time[c] == nil then
      w.time[c], w.fixes[c] = 0, 0
      w.classes[#w.classes + 1] = c
    end
    w.time[c] = w.time[c] + ran
  end
  if not cfg.runtime then return 1 end
  if not ran then return charged or cfg.min_charge_us end
  local cost = math.max(ran, cfg.min_charge_us)
  if charged then
    local key = c .. SEP .. tenant
    if w.tenant_fix[key] == nil then
      w.tenant_fix[key] = 0
      w.tenants[#w.tenants + 1] = {c, tenant, key}
    end
    w.tenant_fix[key] = w.tenant_fix[key] + cost - charged
    w.fixes[c] = w.fixes[c] + cost - charged
  end
  if learning then
    local task = task_of(env)
    learn(w, tenant_estimates(c, tenant), task, ran)
    learn(w, ckey(c, PART_ESTIMATE), task, ran)
  end
  return cost
end

local function finish_work(w)
  for _, c in ipairs(w.classes) do stat('worktime', c, w.time[c]) end
  if not cfg.runtime then return end
  for _, key in ipairs(w.keys) do
    local args = {}
    for task, est in pairs(w.est[key]) do
      args[#args + 1] = task
      args[#args + 1] = est
    end
    redis.call('HSET', key, unpack(args))
  end
  -- A party queued now pays (or gets back) the difference on its tag, and a tenant queued in its
  -- account on its own among the account's tenants; one that left has no tag.
  for _, t in ipairs(w.tenants) do
    local fix = w.tenant_fix[t[3]]
    local party = party_of(t[2])
    if fix ~= 0 and redis.call('ZSCORE', ckey(t[1], PART_TAGS), party) then
      local tier = redis.call('HGET', ckey(t[1], PART_COST), party) or cfg.default_tier
      redis.call('ZINCRBY', ckey(t[1], PART_TAGS), fix * cost_of(tier), party)
      if ACCOUNTS then redis.call('ZADD', akey(t[1], party), 'XX', 'INCR', fix, t[2]) end
    end
  end
  if #w.classes > 0 and (cfg.policy == 'weighted' or cfg.policy == 'weighted-fair') then correct_classes(w.fixes, w.classes) end
end

-- Ack the leases given as (job id, attempts, runtime, state token) in ARGV[first..last] (runtime:
-- µs the job ran, '' when not reported): 1 each, or 0 for a stale lease (expired and reaped,
-- redelivered since, acked earlier in the same list, or of a state since lost). The same state as
-- acking them one by one, with one call per structure and per tenant, not per job.
local function settle(first, last, owner)
  local ids, acked = {}, {}
  for i = first, last, 4 do ids[#ids + 1] = ARGV[i] end
  if #ids == 0 then return acked end
  local records = redis.call('HMGET', K_LEASED, unpack(ids))
  local charged = cfg.runtime and redis.call('HMGET', K_CHARGED, unpack(ids)) or NONE
  local gone, taken, tenants, order = {}, {}, {}, {}
  local w = new_work()
  for k, id in ipairs(ids) do
    acked[k] = 0
    if records[k] and not taken[id] and in_state(ARGV[first + 4 * k - 1]) then
      local f = fields(records[k], REC_HEAD)
      local c, tenant, att = f[REC_QUEUE], f[REC_TENANT], number(f[REC_ATTEMPTS])
      local env = cfg.runtime and rest(records[k], f)  -- read only to learn runtimes
      if att == number(ARGV[first + 4 * k - 3]) then
        acked[k], taken[id] = 1, true
        gone[#gone + 1] = id
        local key = c .. SEP .. tenant
        local t = tenants[key]
        if t == nil then
          t = {c, tenant, 0, 0}  -- class, tenant, jobs, served units
          tenants[key] = t
          order[#order + 1] = t
        end
        t[3] = t[3] + 1
        t[4] = t[4] + ran_for(w, c, tenant, env, tonumber(ARGV[first + 4 * k - 2]), tonumber(charged[k]), true)
      end
    end
  end
  if #gone > 0 then
    finish_work(w)
    redis.call('HDEL', K_LEASED, unpack(gone))
    redis.call('ZREM', K_LEASES, unpack(gone))
    if cfg.runtime then redis.call('HDEL', K_CHARGED, unpack(gone)) end
    if owner then redis.call('ZREM', owned(owner), unpack(gone)) end
  end
  for _, t in ipairs(order) do count_processed(t[1], t[2], t[3], t[4]) end
  return acked
end

-- Capacity left for class i once the unused reservations of the other classes are held back:
-- only those of the classes the popping worker serves (`allowed`), as its slots can keep no other.
local function capacity(i, inflight, slots, allowed)
  if slots <= 0 or not cfg.has_reserved then return math.huge end
  local used, held = 0, 0
  for j = 1, NCLASS do
    used = used + inflight[j]
    if j ~= i and allowed[j] then held = held + math.max(0, cfg.reserved[j] - inflight[j]) end
  end
  return slots - used - held
end

-- Charge the chosen class for the whole visit, `work` units (jobs, or µs under runtime) where its
-- choice counted one: the rest as more rounds of smooth weighted round-robin.
local function charge_visit(swrr, elig, ci, total, work)
  for _, i in ipairs(elig) do swrr[i] = swrr[i] + (work - 1) * cfg.weights[i] end
  swrr[ci] = swrr[ci] - (work - 1) * total
end

-- The party at the head of class c's fair order that may start a job now, and its tag's text, the
-- tenant whose job goes, that tenant's tag in its account (nil without accounts), and the jobs its
-- limits let it start (math.huge under none). Heads held by a limit are parked on the way. nil
-- when every party queued there is held; a party with no tenant is damage, for the caller to say.
local function ready_head(c)
  while true do
    local t = redis.call('ZRANGE', ckey(c, PART_TAGS), '0', '0', 'WITHSCORES')
    local party = t[1]
    if party == nil then return nil end
    local tenant, inner, room, due = party, nil, math.huge, nil
    local account_tat, tenant_tat
    if ACCOUNT_HOLDS then
      room, due, account_tat = headroom(ACCOUNT_MARK .. party, cfg.account_cap, cfg.account_pace_us, cfg.account_burst)
      if room < 1 then park(c, ACCOUNT_MARK .. party, due) end
    end
    if room >= 1 then
      if ACCOUNTS then
        local m = redis.call('ZRANGE', akey(c, party), '0', '0', 'WITHSCORES')
        tenant, inner = m[1], number(m[2])
      end
      if tenant == nil or not TENANT_HOLDS then return party, t[2], tenant, inner, room, account_tat end
      local tier = redis.call('HGET', ckey(c, PART_COST), party) or cfg.default_tier
      local pace = limit_of(cfg.tenant_pace_us, cfg.pace_us, tenant, tier)
      local own
      own, due, tenant_tat = headroom(tenant, limit_of(cfg.tenant_cap, cfg.cap, tenant, tier), pace,
        limit_of(cfg.tenant_burst, cfg.burst, tenant, tier))
      if own >= 1 then return party, t[2], tenant, inner, math.min(room, own), account_tat, tenant_tat, pace, tier end
      park(c, tenant, due)
    end
  end
end

local function head_score(c)
  local h = redis.call('ZRANGE', ckey(c, PART_HEADS), '0', '0', 'WITHSCORES')
  return h[1], tonumber(h[2])
end

-- ARGV[4]: max jobs, ARGV[5]: allowed classes as "1,3" (1-based) or "" for all, ARGV[6]: the
-- popping worker's id ('' none: its leases go back only when they expire), ARGV[7..]: job id,
-- attempts, runtime and state token of each lease to ack first (the worker's finished jobs ride
-- with its next pop: one round trip per job). Returns {now, leased records, 1/0 per ack, 1 when
-- held back by reservations, the state token of the leases}.
function ops.pop()
  local owner = ARGV[6] ~= '' and ARGV[6] or nil
  local acked = settle(7, #ARGV, owner)
  release_delayed(SWEEP_BATCH)
  local want = number(ARGV[4])
  local allowed = ALL
  if ARGV[5] ~= '' then
    allowed = {}
    for i in string.gmatch(ARGV[5], '%d+') do allowed[tonumber(i)] = true end
  end
  local paused = NONE
  local names = redis.call('SMEMBERS', K_PAUSED)
  if #names > 0 then
    paused = {}
    for _, name in ipairs(names) do paused[name] = true end
  end
  local raw = stats_now(POP_FIELDS)
  local depth, inflight = DEPTH, INFLIGHT
  for i = 1, NCLASS do
    depth[i], inflight[i] = raw[2 * i - 1], raw[2 * i]
  end
  local slots = raw[2 * NCLASS + 1]
  local policy = cfg.policy
  local weighted = policy == 'weighted' or policy == 'weighted-fair'
  -- Smooth weighted round-robin's values are read when two classes first contend, and written
  -- then: a class eligible alone gets its weight and pays it back, so the values stay as they were.
  local swrr, stored = nil, nil

  if PACED then release_holds(SWEEP_BATCH) end
  if HOLDS and next(ORDERED) ~= nil then ORDERED = {} end
  local out, took, held = {}, {}, false
  while #out < want do
    local elig, cap = {}, {}
    held = false
    for i = 1, NCLASS do
      local c = cfg.classes[i]
      if allowed[i] and depth[i] > 0 and not paused[c] and ORDERED[i] == nil then
        cap[i] = capacity(i, inflight, slots, allowed)
        if cap[i] >= 1 then elig[#elig + 1] = i else held = true end
      end
    end
    if #elig == 0 then break end


    -- The first eligible class (strict's pick, and the round-robin's when it is alone) unless
    -- the policy picks another; `total` is set when the round-robin chose among two or more.
    local ci, total = elig[1], nil
    if policy == 'fifo' then
      local best
      for _, i in ipairs(elig) do
        local _, s = head_score(cfg.classes[i])
        if best == nil or s < best then ci, best = i, s end
      end
    elseif weighted and #elig > 1 then
      if swrr == nil then swrr, stored = load_swrr() end
      total = 0
      for _, i in ipairs(elig) do
        total = total + cfg.weights[i]
        swrr[i] = swrr[i] + cfg.weights[i]
        if swrr[i] > swrr[ci] then ci = i end
      end
      swrr[ci] = swrr[ci] - total
    end

    local c = cfg.classes[ci]
    local tenant, n
    if policy == 'weighted-fair' then
      local party, tag_text, inner, room, account_tat, tenant_tat, pace, tier
      party, tag_text, tenant, inner, room, account_tat, tenant_tat, pace, tier = ready_head(c)
      if party ~= nil and tenant == nil then
        return redis.error_reply('FAIRCTL_DAMAGED ' .. c .. ' counts ' .. depth[ci] .. ' queued jobs but no tenant ' ..
          'holds any: scheduler keys were deleted or evicted (is maxmemory-policy noeviction?)')
      end
      if party == nil then
        if not (HOLDS and redis.call('EXISTS', HK.held) == 1) then
          return redis.error_reply('FAIRCTL_DAMAGED ' .. c .. ' counts ' .. depth[ci] .. ' queued jobs but no tenant ' ..
            'holds any: scheduler keys were deleted or evicted (is maxmemory-policy noeviction?)')
        end
        -- Every party queued in the class is held by a limit: the class is out of this pop's
        -- choices, and the round-robin's turn it took is given back.
        ORDERED[ci] = false
        if total then
          for _, i in ipairs(elig) do swrr[i] = swrr[i] - cfg.weights[i] end
          swrr[ci] = swrr[ci] + total
        end
        n = 0
      else
        local tag = number(tag_text)
        redis.call('SET', ckey(c, PART_VT), tag_text)  -- the score's text: the same number
        local cost = cost_of(tier or redis.call('HGET', ckey(c, PART_COST), party) or cfg.default_tier)
        local items, left = take(c, tenant, math.min(cfg.batch, want - #out, cap[ci], room))
        n = #items
        local work = cfg.runtime and record_charges(items, estimates(ci, tenant, items)) or n
        if inner then
          if left > 0 then redis.call('ZADD', akey(c, party), int(inner + work), tenant) end
          if left > 0 or redis.call('EXISTS', akey(c, party)) == 1 then
            redis.call('ZADD', ckey(c, PART_TAGS), int(tag + work * cost), party)
          end
        elseif left > 0 then
          redis.call('ZADD', ckey(c, PART_TAGS), int(tag + work * cost), party)
        end
        lease(c, tenant, items, out, owner)
        if account_tat then pace_spent(ACCOUNT_MARK .. party, cfg.account_pace_us, account_tat, n) end
        if tenant_tat then pace_spent(tenant, pace, tenant_tat, n) end
        if total then charge_visit(swrr, elig, ci, total, work) end
      end
    else
      tenant = head_score(c)
      if tenant == nil then
        return redis.error_reply('FAIRCTL_DAMAGED ' .. c .. ' counts ' .. depth[ci] .. ' queued jobs but no tenant ' ..
          'holds any: scheduler keys were deleted or evicted (is maxmemory-policy noeviction?)')
      end
      n = 1
      local items = take(c, tenant, 1)
      if cfg.runtime and weighted then
        local work = record_charges(items, estimates(ci, tenant, items))
        if total then charge_visit(swrr, elig, ci, total, work) end
      end
      lease(c, tenant, items, out, owner)
    end
    if n > 0 then
      depth[ci] = depth[ci] - n
      inflight[ci] = inflight[ci] + n
      took[ci] = true
    end
  end
  -- Work left behind wakes another idle worker, which takes the next (a chain, not a herd).
  for ci, _ in pairs(took) do
    if depth[ci] > 0 then wake(cfg.classes[ci], 0) end
  end

  if swrr ~= nil then save_swrr(swrr, stored) end
  -- A worker left idle wakes when the first rate's hold comes due (its class's wake key).
  if PACED and #out < want then
    local first = redis.call('ZRANGE', HK.held, 0, 0, 'WITHSCORES')
    local due = number(first[2])
    if due and due < math.huge then wake((string.match(first[1], HELD_KEY)), due) end
  end
  -- Held back: nothing leased though a class has work, as other classes' reservations keep the
  -- fleet's free slots (the worker then waits for those classes' work, not for any).
  return {now_text(), out, acked, (#out == 0 and held) and 1 or 0, incarnation}
end

-- ARGV[4]: job id, ARGV[5]: attempts of the lease, ARGV[6]: µs it ran ('' not reported),
-- ARGV[7]: its state token, ARGV[8]: the worker the lease was popped for ('' none)
function ops.ack()
  return settle(4, 7, ARGV[8] ~= '' and ARGV[8] or nil)[1]
end

-- ARGV[4]: job id, ARGV[5]: attempts, ARGV[6]: error text (one line), ARGV[7]: the mode: '0' a
-- failure (retried after backoff, dead-lettered after max_attempts), '1' final (dead-lettered at
-- once whatever the attempts: a failure no retry can mend), '2' unhandled (the worker has no
-- handler for the task: not a failure, see give_back), ARGV[8]: µs it ran ('' not reported),
-- ARGV[9]: the worker the lease was popped for ('' none), ARGV[10]: its state token. A failure is
-- charged the worker time it took, as an ack.
function ops.nack()
  local id = ARGV[4]
  if not in_state(ARGV[10]) then return 'stale' end
  local c, tenant, att, env = held(id, tonumber(ARGV[5]))
  if not c then return 'stale' end
  if ARGV[9] ~= '' then redis.call('ZREM', owned(ARGV[9]), id) end
  if ARGV[7] == '2' then
    -- Unhandled: a worker of another build (a rolling deploy, an old image) leased a task only
    -- newer workers know. Counted 'unhandled', not 'failed', and given back at once, for a
    -- worker that has the handler (the one without it waits before it pops again).
    stat('unhandled', c, 1)
    give_back(id, c, tenant, att, env)
    return 'unhandled'
  end
  local w = new_work()
  ran_for(w, c, tenant, env, tonumber(ARGV[8]), cfg.runtime and tonumber(redis.call('HGET', K_CHARGED, id)), false)
  finish_work(w)
  release_lease(id, c, tenant)
  stat('failed', c, 1)
  if att >= cfg.max_attempts or ARGV[7] == '1' then
    dead_letter(c, tenant, att, env, ARGV[6])
    return 'dead'
  end
  local delay = math.min(cfg.backoff_ms * math.pow(2, att - 1), cfg.backoff_max_ms)
  redis.call('ZADD', K_DELAYED, now + delay, table.concat(record(c, tenant, att, with_attempts(env, att)), SEP))
  stat('delayed', c, 1)
  wake(served_by(c), now + delay)
  return 'retry'
end

-- Give back the leases (job ids and their attempts) still held, off the owner's list (nil: none);
-- how many were held.
local function give_back_all(owner, ids, atts)
  local count = 0
  for k = #ids, 1, -1 do  -- each to the head of its sub-queue, the last first: they keep their order
    local id = ids[k]
    local c, tenant, att, env = held(id, atts[k])
    if c then
      give_back(id, c, tenant, att, env)
      count = count + 1
    end
  end
  if owner and #ids > 0 then redis.call('ZREM', owned(owner), unpack(ids)) end
  return count
end

-- ARGV[4]: a worker, ARGV[5..]: job id and state token of each lease it holds. Every other lease
-- popped for it it never received (a pop whose reply was lost): each goes back at once, its
-- attempt given back. A lease it holds of a state since lost keeps none of the new state's.
-- Returns how many.
function ops.reclaim()
  local keep = {}
  for i = 5, #ARGV, 2 do
    if in_state(ARGV[i + 1]) then keep[ARGV[i]] = true end
  end
  local mine = redis.call('ZRANGE', owned(ARGV[4]), '0', '-1', 'WITHSCORES')
  local lost = {}
  for i = 1, #mine, 2 do
    if not keep[mine[i]] then lost[#lost + 1] = {mine[i], number(mine[i + 1])} end
  end
  table.sort(lost, function(a, b) return tonumber(a[1]) < tonumber(b[1]) end)  -- in the order they were queued
  local ids, atts = {}, {}
  for k, pair in ipairs(lost) do ids[k], atts[k] = pair[1], pair[2] end
  return give_back_all(ARGV[4], ids, atts)
end

-- ARGV[4]: the worker the leases were popped for ('' none), ARGV[5..]: job id, attempts and state
-- token of each lease it gives back unstarted (a stopping worker's prefetched jobs). Returns how
-- many were still held.
function ops.give_back()
  local ids, atts = {}, {}
  for i = 5, #ARGV, 3 do
    if in_state(ARGV[i + 2]) then
      ids[#ids + 1], atts[#atts + 1] = ARGV[i], tonumber(ARGV[i + 1])
    end
  end
  return give_back_all(ARGV[4] ~= '' and ARGV[4] or nil, ids, atts)
end

-- ARGV[4]: job id, ARGV[5]: attempts, ARGV[6]: state token
function ops.extend()
  if not (in_state(ARGV[6]) and held(ARGV[4], tonumber(ARGV[5]))) then return 0 end
  redis.call('ZADD', K_LEASES, 'XX', now + cfg.visibility_ms, ARGV[4])
  return 1
end

-- Every worker reaps each second, so a reap that finds none ran for REAP_GAP_MS follows a time
-- when nobody could renew a registration either: Redis stalled (a slow disk, DEBUG SLEEP), or no
-- worker reached it. Each registration then lapses that much later, and no sooner than
-- REAP_GAP_MS from now: a worker comes back from a stall on its own backoff, so the margin its
-- registration had when the stall began (as little as none) is not enough to renew it in. So a
-- stall costs no live worker its leases; the price is that a fleet restarted whole waits for the
-- old workers' registrations one gap longer.
local function forgive_gap()
  local last = number(redis.call('GET', K_REAPED))
  redis.call('SET', K_REAPED, now_text())
  if last == nil or now - last <= REAP_GAP_MS then return end
  local regs = redis.call('ZRANGE', K_WORKERS, '0', '-1', 'WITHSCORES')
  local later = {}
  for i = 1, #regs, 2 do
    later[#later + 1] = int(math.max(number(regs[i + 1]) + now - last, now + REAP_GAP_MS))
    later[#later + 1] = regs[i]
  end
  if #later > 0 then redis.call('ZADD', K_WORKERS, unpack(later)) end
end

-- ARGV[4]: limit. Expired leases go back to the head of their tenant's sub-queue (or dead-letter
-- after max_attempts deliveries); a worker whose registration lapsed (its heartbeat stopped:
-- killed, or cut off from Redis) loses its slots and every lease it held. Returns {leases taken
-- back, retries released, workers dropped}.
function ops.reap()
  local limit = tonumber(ARGV[4])
  forgive_gap()
  redis.call('ZREMRANGEBYSCORE', K_RETURNED, '-inf', int(now - RETURNED_KEEP_MS))
  -- A rate's bucket full again is as good as none: memory stays bounded by the tenants paced now.
  if PACED then redis.call('ZREMRANGEBYSCORE', HK.pace, '-inf', int(now * 1000)) end
  local count = 0
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', K_LEASES, '-inf', now, 'LIMIT', 0, limit)) do
    local c, tenant, att, env = parse_record(redis.call('HGET', K_LEASED, id))
    take_back(id, c, tenant, att, env, 'lease expired')
    count = count + 1
  end
  local gone = redis.call('ZRANGEBYSCORE', K_WORKERS, '-inf', now, 'LIMIT', 0, limit)
  for _, w in ipairs(gone) do count = count + drop_worker(w, 'worker lost') end
  return {count, release_delayed(limit), #gone}
end

-- Aging: jobs waiting longer than their class's promote_after move one class up. Aging is fair
-- too: one visit per overdue tenant, oldest first, at most `batch` jobs each, so a flood's backlog
-- cannot turn into a flood of promoted jobs in the class above. A sweep reads the overdue tenants
-- of a class (`overdue`), then visits them a few per call (`promote`), so no call holds Redis long.

-- The class named ARGV[4]'s index and cutoff (ms), or nil when it is not configured or not aged.
local function aging(name)
  for i = 2, NCLASS do
    if cfg.classes[i] == name and cfg.promote_ms[i] > 0 then return i, now - cfg.promote_ms[i] end
  end
end

-- ARGV[4]: class, ARGV[5]: limit. Its overdue tenants, oldest head first.
function ops.overdue()
  local i, cutoff = aging(ARGV[4])
  if i == nil then return {} end
  return redis.call('ZRANGEBYSCORE', ckey(ARGV[4], PART_HEADS), '-inf', cutoff, 'LIMIT', 0, tonumber(ARGV[5]))
end

-- ARGV[4]: class, ARGV[5]: jobs the sweep may still move, ARGV[6..]: tenants to visit, in order
-- (one still overdue loses up to `batch` overdue jobs to the class above). Returns jobs moved.
function ops.promote()
  local i, cutoff = aging(ARGV[4])
  if i == nil then return 0 end
  local c, up, budget, moved = cfg.classes[i], cfg.classes[i - 1], tonumber(ARGV[5]), 0
  for k = 6, #ARGV do
    if moved >= budget then break end
    local tenant = ARGV[k]
    local head = tonumber(redis.call('ZSCORE', ckey(c, PART_HEADS), tenant))
    if head ~= nil and head <= cutoff then
      local qk = tkey(c, tenant)
      local overdue = 0
      for _, env in ipairs(redis.call('LRANGE', qk, 0, math.min(cfg.batch, budget - moved) - 1)) do
        local _, enq = header(env)
        if enq > cutoff then break end
        overdue = overdue + 1
      end
      if overdue == 0 then
        local _, enq = header(redis.call('LINDEX', qk, 0))
        redis.call('ZADD', ckey(c, PART_HEADS), enq, tenant)
      else
        local items, left = take(c, tenant, overdue)
        if left == 0 and cfg.runtime then forget(c, tenant) end
        if HOLDS then
          held_jobs(c, tenant, -#items, false)
          if left == 0 then
            local due = held_in(c, tenant)  -- a held tenant with no job left in the class: no hold
            if due then
              stat('held', c .. SEP .. hold_reason(tenant, due), -1)
              redis.call('ZREM', HK.held, c .. SEP .. tenant)
            end
          end
        end
        for j = #items, 1, -1 do push_head(up, tenant, items[j]) end
        stat('promoted', c, #items)
        moved = moved + #items
      end
    end
  end
  return moved
end

-- ARGV[4]: 'requeue' or 'drop', ARGV[5]: class name ('' any), ARGV[6]: at most this many,
-- ARGV[7..]: job ids (none: the oldest dead letters of the class). Takes matching dead letters off
-- the list, oldest first; a requeued job goes to the tail of its tenant's sub-queue in its class
-- with its id, tenant, task, reason, cost and payload, attempts reset and enqueued now. A dead
-- letter whose class is no longer configured is left in the list. Returns {ids done, ids skipped}.
function ops.dead()
  local action, only, limit = ARGV[4], ARGV[5], tonumber(ARGV[6])
  local wanted = nil
  if #ARGV > 6 then
    wanted = {}
    for i = 7, #ARGV do wanted[ARGV[i]] = true end
  end
  local known = {}
  for i = 1, NCLASS do known[cfg.classes[i]] = true end
  for old, _ in pairs(cfg.moved) do known[old] = true end
  local done, skipped = {}, {}
  for _, line in ipairs(redis.call('LRANGE', K_DEAD, 0, -1)) do
    if #done + #skipped >= limit then break end
    local f = fields(line, DEAD_HEAD)
    local c, tenant, env = f[DEAD_QUEUE], f[DEAD_TENANT], rest(line, f)
    local id = header(env)
    if (only == '' or c == only) and (wanted == nil or wanted[id]) then
      if wanted then wanted[id] = nil end
      if action == 'requeue' and not known[c] then
        skipped[#skipped + 1] = id
      else
        redis.call('LREM', K_DEAD, 1, line)
        stat('deadlist', c, -1)
        if action == 'requeue' then
          local e = fields(env, ENV_HEAD)
          local tail = rest(env, e)
          e[ENV_ENQUEUED_MS], e[ENV_ATTEMPTS] = stamp(now), ''
          push_tail(c, tenant, named(e[ENV_TIER]), table.concat(e, SEP) .. SEP .. tail, now)
        end
        done[#done + 1] = id
      end
    end
  end
  return {done, skipped}
end

-- ARGV[4]: worker id, ARGV[5]: slots, ARGV[6]: ttl ms (slots 0 = unregister: the leases it still
-- holds, jobs it abandoned, go back at once). Returns the leases taken back.
function ops.register()
  local w, slots = ARGV[4], tonumber(ARGV[5])
  if slots <= 0 then return drop_worker(w, 'worker stopped') end
  local old = num(redis.call('HGET', K_WSLOTS, w))
  redis.call('HINCRBY', K_STATS, 'slots', slots - old)
  redis.call('HSET', K_WSLOTS, w, slots)
  redis.call('ZADD', K_WORKERS, now + tonumber(ARGV[6]), w)
  return 0
end

-- The parties changed (accounts turned on or off, or split another way): each class's tags, tiers
-- and tier counts are rebuilt from its queued tenants, every party from zero, each charged as
-- its tenants' latest jobs' tiers. One pass over the queued tenants, as rare as such an apply.
local function regroup(c)
  for _, party in ipairs(redis.call('ZRANGE', ckey(c, PART_TAGS), 0, -1)) do redis.call('DEL', akey(c, party)) end
  for _, account in ipairs(redis.call('ZRANGE', ckey(c, PART_ACCOUNT_BACKLOG), 0, -1)) do
    redis.call('DEL', tiers_key(c, account))
  end
  for _, tier in ipairs(redis.call('HVALS', ckey(c, PART_COST))) do
    redis.call('HSET', K_STATS, 'tenants' .. SEP .. c .. SEP .. tier, 0)
  end
  redis.call('HSET', K_STATS, 'tenants' .. SEP .. c .. SEP .. cfg.default_tier, 0)
  redis.call('DEL', ckey(c, PART_TAGS), ckey(c, PART_COST), ckey(c, PART_VT), ckey(c, PART_ACCOUNT_BACKLOG),
    ckey(c, PART_KEY_TIER))
  local queued = redis.call('ZRANGE', ckey(c, PART_BACKLOG), 0, -1, 'WITHSCORES')
  for k = 1, #queued, 2 do
    local tenant = queued[k]
    local _, enq = header(redis.call('LINDEX', tkey(c, tenant), 0))
    local _, _, _, tier = header(redis.call('LINDEX', tkey(c, tenant), -1))
    activate(c, tenant, named(tier), enq)
    if ACCOUNTS then count_account(c, tenant, tonumber(queued[k + 1])) end
  end
end

-- ARGV[4]: the fingerprint the caller read ('' when none is applied), ARGV[5]: the config's text,
-- ARGV[6]: its moves' text, ARGV[7]: '1' when the charge basis changed (jobs or runtime),
-- ARGV[8]: '1' to check, ARGV[9]: the names jobs store as codes, as text ('' for none),
-- ARGV[10]: '1' when the parties changed (regroup), ARGV[11]: the default tier of the config
-- applied until now when it is not this config's ('' otherwise): queued parties with no cost entry
-- are of it, and keep it (their entries are written in; with accounts, the keys' too), ARGV[12]:
-- '1' when the tiers' costs changed: with accounts, each queued account is charged again at the
-- highest tier of its queued keys, as the new costs order them.
-- Compiled from the config being applied. Checked, it is refused, changing nothing, when a class
-- the config does not name still holds jobs and no move says where they go, or a tier it does not
-- name is still a queued tenant's. The first config of a group (a process adopting its own) is
-- not checked: what an older release left there is kept where it is, and shows as unconfigured.
-- Returns {'applied', version}, {'conflict', fingerprint now applied} or
-- {'refused', {class, jobs, ...}, {tier, ...}}.
function ops.apply()
  local current = redis.call('HGET', K_CONFIG, 'fingerprint') or ''
  if current ~= ARGV[4] then return {'conflict', current} end
  -- The config applied already (its apply sent again after a lost reply, or a sharded apply run
  -- again over the shards it reached): nothing to do, and no new version.
  if current == cfg.fingerprint then return {'applied', num(redis.call('HGET', K_CONFIG, 'version'))} end
  local others, held = unconfigured(redis.call('HGETALL', K_STATS))
  local refused = {}
  for _, c in ipairs(others) do
    if held[c] > 0 and not cfg.moved[c] then
      refused[#refused + 1] = c
      refused[#refused + 1] = held[c]
    end
  end
  local classes = {}  -- every class that may hold tenants: the configured ones, then the others
  for i = 1, NCLASS do classes[i] = cfg.classes[i] end
  for _, c in ipairs(others) do classes[#classes + 1] = c end
  local implied = ARGV[11] or ''
  local tiers, bad = {}, {}
  local function check_tier(tier)
    if not (cfg.costs[tier] or cfg.tier_moved[tier] or recorded_cost(tier) or bad[tier]) then
      bad[tier] = true
      tiers[#tiers + 1] = tier
    end
  end
  for _, c in ipairs(classes) do
    for _, tier in ipairs(redis.call('HVALS', ckey(c, PART_COST))) do check_tier(tier) end
    for _, tier in ipairs(redis.call('HVALS', ckey(c, PART_KEY_TIER))) do check_tier(tier) end
    if implied ~= '' and (redis.call('ZCARD', ckey(c, PART_TAGS)) > redis.call('HLEN', ckey(c, PART_COST))
        or ACCOUNTS and redis.call('ZCARD', ckey(c, PART_BACKLOG)) > redis.call('HLEN', ckey(c, PART_KEY_TIER))) then
      check_tier(implied)
    end
  end
  if ARGV[8] == '1' and (#refused > 0 or #tiers > 0) then
    table.sort(tiers)
    return {'refused', refused, tiers}
  end
  redis.call('HSET', K_CONFIG, 'yaml', ARGV[5], 'moves', ARGV[6], 'names', ARGV[9], 'fingerprint', cfg.fingerprint,
    'applied_ms', now)
  -- When the group's state was created: a reset (Redis restarted without persistence, a failover
  -- to an empty replica, a FLUSHALL) removes it with everything else, and the group created anew
  -- has another, which is how a process that knew the old one tells. Read to the µs (a test's
  -- clock: to the ms), so that a group wiped and created anew within the same ms has another too:
  -- it is the token of the leases made in this state.
  if current == '' then
    local t = ARGV[3] == '' and redis.call('TIME')
    redis.call('HSET', K_CONFIG, 'created_ms', t and string.format('%.3f', t[1] * 1000 + t[2] / 1000) or now_text())
  end
  local version = redis.call('HINCRBY', K_CONFIG, 'version', 1)
  -- Smooth weighted round-robin restarts from zero: the new weights hold from the first round,
  -- and no class gets a burst to catch up on credit it banked under the old ones.
  redis.call('DEL', K_SWRR)
  -- Jobs in flight keep the charge of their pop: their acks correct nothing.
  redis.call('DEL', K_CHARGED)
  -- Runtime estimates are kept only while charging by runtime: leaving it (ARGV[7]) drops them,
  -- and so does a group's first apply (what an older release left).
  -- Otherwise a group charged by jobs has none to drop (each is written under runtime, and a
  -- tenant's go with its last queued or leased job), so a routine apply makes no pass over its tenants.
  if not cfg.runtime and (ARGV[7] == '1' or current == '') then
    for _, c in ipairs(classes) do
      for _, part in ipairs({PART_BACKLOG, PART_INFLIGHT}) do
        for _, tenant in ipairs(redis.call('ZRANGE', ckey(c, part), 0, -1)) do redis.call('DEL', tenant_estimates(c, tenant)) end
      end
      redis.call('DEL', ckey(c, PART_ESTIMATE))
    end
  end
  -- The default tier changed: the queued parties of the old one (no cost entry) keep it. One pass
  -- over the queued parties, as rare as such an apply.
  local function write_in(hash, names)
    for first = 1, #names, 1000 do  -- a thousand a command: unpack's limit is a few thousand
      local some = {unpack(names, first, math.min(first + 999, #names))}
      local have, add = redis.call('HMGET', hash, unpack(some)), {}
      for k, name in ipairs(some) do
        if not have[k] then
          add[#add + 1] = name
          add[#add + 1] = implied
        end
      end
      if #add > 0 then redis.call('HSET', hash, unpack(add)) end
    end
  end
  if implied ~= '' then
    for _, c in ipairs(classes) do
      write_in(ckey(c, PART_COST), redis.call('ZRANGE', ckey(c, PART_TAGS), 0, -1))
      if ACCOUNTS and ARGV[10] ~= '1' then
        write_in(ckey(c, PART_KEY_TIER), redis.call('ZRANGE', ckey(c, PART_BACKLOG), 0, -1))
      end
    end
  end
  -- Holds are decided again under the new limits: every held member rejoins its order (its next
  -- visit holds it again if it is still over; a regroup then rebuilds the order); and the leases
  -- a cap counts are counted again from the leases held now.
  local holds = redis.call('ZRANGE', HK.held, 0, -1, 'WITHSCORES')
  for k = 1, #holds, 2 do
    local c, member = string.match(holds[k], HELD_KEY)
    count_hold(c, member, number(holds[k + 1]), -1)
  end
  redis.call('DEL', HK.held, HK.capped, HK.running)
  for k = 1, #holds, 2 do rejoin(string.match(holds[k], HELD_KEY)) end
  if not PACED then redis.call('DEL', HK.pace) end
  if cfg.has_cap or (ACCOUNTS and cfg.account_cap > 0) then
    for _, c in ipairs(classes) do
      local leased = redis.call('ZRANGE', ckey(c, PART_INFLIGHT), 0, -1, 'WITHSCORES')
      for k = 1, #leased, 2 do leases_counted(leased[k], tonumber(leased[k + 1])) end
    end
  end
  -- Tags are in units of the charge basis: across a change of it no tenant keeps its place. New
  -- tier costs keep the tags: each queued party's is at most one visit ahead of the virtual time,
  -- charged at the old cost, and its next visit is charged at the new one (no pass over the tenants).
  if ARGV[10] == '1' then
    for _, c in ipairs(classes) do regroup(c) end
  elseif ARGV[7] == '1' then
    for _, c in ipairs(classes) do
      if redis.call('EXISTS', ckey(c, PART_TAGS)) == 1 then
        if ACCOUNTS then
          for _, party in ipairs(redis.call('ZRANGE', ckey(c, PART_TAGS), 0, -1)) do
            redis.call('ZUNIONSTORE', akey(c, party), 1, akey(c, party), 'WEIGHTS', 0)
          end
        end
        redis.call('ZUNIONSTORE', ckey(c, PART_TAGS), 1, ckey(c, PART_TAGS), 'WEIGHTS', 0)
      end
      redis.call('DEL', ckey(c, PART_VT))
    end
  end
  if ACCOUNTS and ARGV[10] ~= '1' and ARGV[12] == '1' then
    for _, c in ipairs(classes) do
      for _, account in ipairs(redis.call('ZRANGE', ckey(c, PART_ACCOUNT_BACKLOG), 0, -1)) do charge_top(c, account) end
    end
  end
  return {'applied', version}
end

-- Up to `limit` retries of class `old` waiting for their backoff, soonest due first, become
-- `new`'s, each keeping its due time: left as they were they would count as `old`'s, a class no
-- worker serves, until due. One pass over the delayed set, made only while `old` has some there.
local function move_delayed(old, new, limit)
  if limit <= 0 or num(redis.call('HGET', K_STATS, 'delayed' .. SEP .. old)) <= 0 then return 0 end
  local found = {}
  for first = 0, math.huge, 1000 do
    local some = redis.call('ZRANGE', K_DELAYED, first, first + 999, 'WITHSCORES')
    for k = 1, #some, 2 do
      if #found < 2 * limit and fields(some[k], REC_HEAD)[REC_QUEUE] == old then
        found[#found + 1], found[#found + 2] = some[k], some[k + 1]
      end
    end
    if #some < 2000 or #found >= 2 * limit then break end
  end
  for k = 1, #found, 2 do
    local _, tenant, att, env = parse_record(found[k])
    redis.call('ZREM', K_DELAYED, found[k])
    redis.call('ZADD', K_DELAYED, found[k + 1], table.concat(record(new, tenant, att, env), SEP))
    stat('delayed', old, -1)
    stat('delayed', new, 1)
    wake(new, tonumber(found[k + 1]))
  end
  return #found / 2
end

-- ARGV[4]: at most this many jobs. Queued jobs of removed classes move to the classes the applied
-- config moved them to, oldest tenant first, each tenant's jobs taken from its tail so they keep
-- their order in front of the target's own; each keeps its enqueue time, so its age. Then their
-- retries waiting for their backoff (move_delayed). Returns how many moved: 0 when none is left.
function ops.move()
  local limit, moved = tonumber(ARGV[4]), 0
  for _, pair in ipairs(cfg.moves) do
    local old, new = pair[1], pair[2]
    while moved < limit do
      local tenant = head_score(old)
      if tenant == nil then break end
      local items, left = take(old, tenant, limit - moved, true)
      if left == 0 and cfg.runtime then forget(old, tenant) end
      for _, env in ipairs(items) do
        push_head(new, tenant, env)
        moved = moved + 1
      end
    end
    moved = moved + move_delayed(old, new, limit - moved)
  end
  return moved
end

-- What the exporter serves comes in one pipelined round trip of one call per class and this
-- global call, so no call holds Redis long at any number of tenants (one call for all classes ran
-- 1-2 ms at 100,000 tenants): O((k + sample) * log n) each, no scans. ARGV[4]: the class index.
function ops.snapshot_class()
  local c = cfg.classes[tonumber(ARGV[4])]
  local bucket = math.floor(now / cfg.window_ms)
  local function served(b, n)
    return redis.call('ZREVRANGE', ckey(c, PART_SERVED .. b), 0, n - 1, 'WITHSCORES')
  end
  -- The fairness sample: the most backlogged parties (tenants, or with accounts the accounts: the
  -- unit fair queuing is fair to). One call per structure for all of them, so a scrape's commands
  -- do not grow with the sample (three per tenant did: 485 commands a scrape at 100,000 tenants).
  local queued, served_part = PART_BACKLOG, PART_SERVED
  if ACCOUNTS then queued, served_part = PART_ACCOUNT_BACKLOG, PART_ACCOUNT_SERVED end
  local backlog = redis.call('ZREVRANGE', ckey(c, queued), 0, cfg.sample - 1)
  local rows = {}
  if #backlog > 0 then
    local tiers = redis.call('HMGET', ckey(c, PART_COST), unpack(backlog))
    local now_served = redis.call('ZMSCORE', ckey(c, served_part .. bucket), unpack(backlog))
    local before = redis.call('ZMSCORE', ckey(c, served_part .. (bucket - 1)), unpack(backlog))
    for k, party in ipairs(backlog) do
      rows[#rows + 1] = party
      rows[#rows + 1] = cost_of(tiers[k] or cfg.default_tier)
      rows[#rows + 1] = now_served[k] or '0'
      rows[#rows + 1] = before[k] or '0'
    end
  end
  -- With accounts: the parties queued, their service in both buckets and their backlog.
  local accounts = {}
  if ACCOUNTS then
    local function by_account(b)
      return redis.call('ZREVRANGE', ckey(c, PART_ACCOUNT_SERVED .. b), 0, cfg.served_top - 1, 'WITHSCORES')
    end
    local now_top, before_top = by_account(bucket), by_account(bucket - 1)
    -- The busiest accounts by the sliding window, as their shares are ranked (both buckets, the
    -- previous one weighted by what of it is still in the window; ties at the last place all in:
    -- RawClass.key_accounts in fairness_core/snapshot.py), so their keys are served while their
    -- shares are, also just after a bucket edge, when the current bucket is empty.
    local weight = (cfg.window_ms - now % cfg.window_ms) / cfg.window_ms
    local service, order = {}, {}
    for i = 1, #before_top, 2 do
      order[#order + 1] = before_top[i]
      service[before_top[i]] = tonumber(before_top[i + 1]) * weight
    end
    for i = 1, #now_top, 2 do
      local account = now_top[i]
      if service[account] == nil then order[#order + 1] = account end
      service[account] = (service[account] or 0) + tonumber(now_top[i + 1])
    end
    local ranked = {}
    for k, account in ipairs(order) do ranked[k] = service[account] end
    table.sort(ranked, function(x, y) return x > y end)
    local least = ranked[math.min(#ranked, cfg.account_top)]
    -- Their busiest queued keys (the highest tags among them: served most) with their service in
    -- both buckets: a spread account's keys are each too small for the class's lists.
    local keys = {}
    for _, account in ipairs(order) do
      local busiest = service[account] >= least and redis.call('ZREVRANGE', akey(c, account), 0, cfg.account_keys - 1)
      if busiest and #busiest > 0 then
        local now_served = redis.call('ZMSCORE', ckey(c, PART_SERVED .. bucket), unpack(busiest))
        local before = redis.call('ZMSCORE', ckey(c, PART_SERVED .. (bucket - 1)), unpack(busiest))
        for k, key in ipairs(busiest) do
          keys[#keys + 1] = account
          keys[#keys + 1] = key
          keys[#keys + 1] = now_served[k] or '0'
          keys[#keys + 1] = before[k] or '0'
        end
      end
    end
    -- The most backlogged accounts, and how many keys each has queued in its fair order.
    local top_backlog = redis.call('ZREVRANGE', ckey(c, PART_ACCOUNT_BACKLOG), 0, cfg.backlog_top - 1, 'WITHSCORES')
    local key_counts = {}
    for i = 1, #top_backlog, 2 do key_counts[#key_counts + 1] = redis.call('ZCARD', akey(c, top_backlog[i])) end
    accounts = {redis.call('ZCARD', ckey(c, PART_ACCOUNT_BACKLOG)), now_top, before_top, top_backlog, keys, key_counts}
  end
  -- Of the heads read, the tenants held by a dispatch limit (their own or their account's): they
  -- wait on their own limit, so the quiet tenants' age passes them by. One ZMSCORE for them all.
  local heads = redis.call('ZRANGE', ckey(c, PART_HEADS), 0, cfg.heads - 1, 'WITHSCORES')
  local held = {}
  if HOLDS and #heads > 0 then
    local members, per = {}, ACCOUNT_HOLDS and 2 or 1
    for k = 1, #heads, 2 do
      members[#members + 1] = c .. SEP .. heads[k]
      if ACCOUNT_HOLDS then members[#members + 1] = c .. SEP .. ACCOUNT_MARK .. account_of(heads[k]) end
    end
    local due = redis.call('ZMSCORE', HK.held, unpack(members))
    for k = 1, #heads, 2 do
      local at = (k - 1) / 2 * per
      if due[at + 1] or (per == 2 and due[at + 2]) then held[#held + 1] = heads[k] end
    end
  end
  return {
    heads,
    redis.call('ZCARD', ckey(c, PART_BACKLOG)),
    redis.call('ZREVRANGE', ckey(c, PART_BACKLOG), 0, cfg.backlog_top - 1, 'WITHSCORES'),
    redis.call('ZREVRANGE', ckey(c, PART_INFLIGHT), 0, cfg.inflight_top - 1, 'WITHSCORES'),
    served(bucket, cfg.served_top),
    served(bucket - 1, cfg.served_top),
    num(redis.call('GET', ckey(c, PART_SERVED_TOTAL .. bucket))),
    num(redis.call('GET', ckey(c, PART_SERVED_TOTAL .. (bucket - 1)))),
    rows,
    accounts,
    held,
  }
end

-- The counters, paused classes, dead letters, and each class the config does not name that still
-- holds jobs with its oldest queued job's enqueue time.
function ops.snapshot()
  local stats = redis.call('HGETALL', K_STATS)
  local others, held = unconfigured(stats)
  local oldest = {}
  for _, c in ipairs(others) do
    if held[c] > 0 then
      oldest[#oldest + 1] = c
      oldest[#oldest + 1] = redis.call('ZRANGE', ckey(c, PART_HEADS), 0, 0, 'WITHSCORES')[2] or ''
    end
  end
  return {tostring(now), stats, redis.call('SMEMBERS', K_PAUSED), redis.call('LLEN', K_DEAD), oldest}
end

-- The group-wide key names of the last key base seen: a worker's calls all name the same group.
local keys_of = nil

local function call(keys, args)
  if not bound then
    redis, tonumber, tostring, string, math, table, unpack, pairs, ipairs, next = runtime_globals()
    bound = true
  end
  ARGV, op, base = args, args[1], args[2]
  if base ~= keys_of then
    K_STATS, K_SWRR, K_PAUSED, K_ARR, K_SEQ, K_LEASES = base .. KEY_STATS, base .. KEY_SWRR, base .. KEY_PAUSED,
      base .. KEY_ARRIVALS, base .. KEY_SEQ, base .. KEY_LEASES
    K_LEASED, K_DELAYED, K_DEAD, K_WORKERS, K_WSLOTS = base .. KEY_LEASED, base .. KEY_DELAYED, base .. KEY_DEAD,
      base .. KEY_WORKERS, base .. KEY_WORKER_SLOTS
    K_CONFIG, K_CHARGED, keys_of = base .. KEY_CONFIG, base .. CHARGED, base
    K_RETURNED, K_REAPED = base .. KEY_RETURNED, base .. KEY_REAPED
    HK.running, HK.pace, HK.held, HK.capped = base .. KEY_RUNNING, base .. KEY_PACE, base .. KEY_HELD, base .. KEY_CAPPED
  end
  -- Every call runs the applied config or nothing: code compiled from another config (a process
  -- that has not seen the latest `fairctl config apply`, or one that has not applied any) is
  -- refused before it reads or writes anything, and its process reloads the applied config and retries.
  -- The same read gives the state's token (one HMGET, as cheap as the HGET of the fingerprint alone).
  local stored = redis.call('HMGET', K_CONFIG, 'fingerprint', 'created_ms')
  if op ~= 'apply' and stored[1] ~= cfg.fingerprint then
    return redis.error_reply('FAIRCTL_STALE_CONFIG the queue group runs another config than this process')
  end
  incarnation = stored[2] or ''
  now_s = nil
  if ARGV[3] ~= '' then
    now = tonumber(ARGV[3])
  else
    local t = redis.call('TIME')  -- seconds and µs as text: arithmetic converts each once, tonumber twice
    now = t[1] * 1000 + math.floor(t[2] / 1000)
  end
  local fn = ops[op]
  if fn == nil then return redis.error_reply('fairctl: unknown operation ' .. tostring(op)) end
  if next(pending) ~= nil then pending = {} end  -- left by a call that failed: never written
  if next(woken) ~= nil then woken = {} end
  if next(tiered) ~= nil then tiered = {} end
  if next(arrived) ~= nil then arrived = {} end  -- left by a call that failed
  rolled = false
  local out = fn()
  flush_stats()
  flush_arrivals()
  return out
end
