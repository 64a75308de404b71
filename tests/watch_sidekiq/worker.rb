# The job the Sidekiq watch tests queue, run by a real `sidekiq -r` process: a tenant's piece of
# work, short by default; a longer one (third argument, seconds) stays busy long enough for
# Sidekiq's heartbeat (every 5 s in 6.4) to record it as running.
require "sidekiq"

class Work
  include Sidekiq::Worker
  sidekiq_options retry: false

  def perform(tenant, n, seconds = 0.01)
    sleep seconds
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
