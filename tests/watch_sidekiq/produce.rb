# Queues jobs with Sidekiq's own client (Sidekiq::Client.push_bulk), so the tests read the job JSON
# exactly as Sidekiq writes it. Reads a JSON list of batches on stdin,
# [{"queue": "bulk", "class": "Work", "args": [["flooder", 0], ...]}, ...], each with an optional
# "retry" (the client does not load the job classes, so their sidekiq_options do not apply);
# REDIS_URL names the Redis.
require "json"
require "sidekiq"

JSON.parse($stdin.read).each do |batch|
  Sidekiq::Client.push_bulk(batch.slice("queue", "class", "args", "retry"))
end
