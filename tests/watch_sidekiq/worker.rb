# The jobs the Sidekiq watch tests queue, run by a real `sidekiq -r` process: a tenant's piece of
# work, short by default; a longer one (third argument, seconds) stays busy long enough for
# Sidekiq's heartbeat (every 5 s in 6.4) to record it as running, and notes when it started
# (test:started, by jid) for the tests to check the waits against.
require "sidekiq"

def note_start(jid)
  Sidekiq.redis { |conn| conn.hset("test:started", jid, Time.now.to_f.to_s) }
end

class Work
  include Sidekiq::Worker
  sidekiq_options retry: false

  def perform(tenant, n, seconds = 0.01)
    note_start(jid) if seconds >= 1
    sleep seconds
  end
end

# A job that raises after its seconds: with no retry, Sidekiq sends it to the dead set at once.
class Doomed
  include Sidekiq::Worker
  sidekiq_options retry: 0

  def perform(tenant, n, seconds = 0)
    note_start(jid) if seconds >= 1
    sleep seconds
    raise "failed on purpose"
  end
end

# The sleep job fairctl loadgen queues by default, as docs/watching.md defines it: the job's last
# argument is its service time in seconds (the ones before it carry its tenant).
class FairctlSleep
  include Sidekiq::Worker

  def perform(*args)
    sleep args.last.to_f
  end
end
