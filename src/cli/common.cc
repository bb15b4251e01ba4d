#include "cli/common.h"

#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "util/error.h"
#include "util/parse.h"

namespace deltafin::cli {

void add_model_options(CLI::App* cmd, ModelArgs& a) {
  cmd->add_option("--model", a.model, "Hugging Face model directory, or a store made by `deltafin pack`")->required();
  cmd->add_option("--threads", a.threads, "compute threads (default: all cores)")->check(CLI::Range(0, 1024));
  cmd->add_option("--ctx-size", a.ctx_size,
                  "longest sequence in tokens; its KV cache is charged to --ram-budget (default: 4096 with "
                  "--ram-budget, else unlimited)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  auto* g = cmd->add_option_group("streaming", "when --model is a store");
  g->add_option("--ram-budget", a.ram_budget, "bound on RAM: spine + caches + expert slots, e.g. 6G");
  g->add_option("--drives", a.drives, "drive directories (comma-separated), overriding the store's");
  g->add_option("--io", a.io, "I/O engine: uring (default) or pread");
  g->add_option("--queue-depth", a.queue_depth, "reads in flight per drive")->check(CLI::Range(1, 1024));
  g->add_option("--read-chunk", a.read_chunk, "split each expert read into pieces of this size (default 2M; 0: whole records)");
  g->add_option("--pilot", a.pilot, "prefetch the next layer's predicted experts: on (default) or off");
  g->add_option("--pilot-reads", a.pilot_reads, "prefetch reads per layer, most likely picks first (0: all picks)")
      ->check(CLI::Range(0, 1 << 20));
  g->add_option("--cache-policy", a.cache_policy, "dynamic expert cache: lru (default) or lfu");
  g->add_option("--hot-fraction", a.hot_fraction, "share of expert slots pinned from the heat histogram")
      ->check(CLI::Range(0.0, 1.0));
  g->add_flag("--verify-reads", a.verify_reads, "check every expert read against its checksum");
  g->add_flag("--no-heat-update", a.no_heat_update, "do not add this run's routes to STORE/heat.json");
  g->add_flag("--skip-missing-drives", a.skip_missing_drives, "read mirrors when a drive directory is gone");
  cmd->add_flag("--stats", a.stats, "print the run's statistics to stderr");
  cmd->add_option("--stats-json", a.stats_json, "write the run's statistics as JSON to FILE");
}

std::unique_ptr<Runtime> load(const ModelArgs& a) {
  RuntimeOptions o;
  o.threads = a.threads;
  o.context = a.ctx_size;
  if (!a.ram_budget.empty()) o.ram_budget = parse_byte_size(a.ram_budget, "--ram-budget");
  if (!a.drives.empty()) {
    std::stringstream ss(a.drives);
    std::string d;
    while (std::getline(ss, d, ',')) o.drives.push_back(d);
  }
  o.io = store::parse_io_kind(a.io, "--io");
  o.queue_depth = a.queue_depth;
  if (!a.read_chunk.empty()) o.read_chunk = parse_byte_size(a.read_chunk, "--read-chunk");
  if (a.pilot != "on" && a.pilot != "off") fail("--pilot: '{}' must be on or off", a.pilot);
  o.pilot = a.pilot == "on";
  o.pilot_reads = static_cast<size_t>(a.pilot_reads);
  o.cache_policy = residency::parse_cache_policy(a.cache_policy);
  o.hot_fraction = a.hot_fraction;
  o.verify_reads = a.verify_reads;
  o.update_heat = !a.no_heat_update;
  o.skip_missing_drives = a.skip_missing_drives;
  return Runtime::open(a.model, o);
}

void report_stats(const ModelArgs& a, Runtime& rt, const SessionStats& s, double ttft_s,
                  const residency::StreamStats* at_first_token) {
  if (!a.stats && a.stats_json.empty()) return;
  nlohmann::json j = {{"model", a.model},
                      {"threads", rt.pool().threads()},
                      {"prefill_tokens", s.prefill_tokens},
                      {"prefill_tok_s", s.prefill_tok_s()},
                      {"decode_tokens", s.decode_tokens},
                      {"decode_tok_s", s.decode_tok_s()},
                      {"ttft_s", ttft_s},
                      {"peak_rss_bytes", peak_rss_bytes()},
                      {"start_state", "page cache as found (not dropped)"}};
  const auto* st = rt.stream_stats();
  if (st) {
    const BudgetPlan& b = rt.budget();
    const uint64_t tokens = std::max<int64_t>(1, s.prefill_tokens + s.decode_tokens);
    const double uses = std::max<uint64_t>(1, st->expert_uses);
    nlohmann::json drives = nlohmann::json::array();
    const auto* es = rt.expert_store();
    // Throughput per drive over the run's prefill and decode time (not the
    // drive's own busy time, which the engine does not see).
    const double run_s = s.prefill_seconds + s.decode_seconds;
    for (int d = 0; d < es->drives().size(); ++d)
      drives.push_back({{"dir", es->drives().dir(d)}, {"bytes_read", es->bytes_read(d)},
                        {"read_GBps", run_s > 0 ? es->bytes_read(d) / run_s / 1e9 : 0.0},
                        {"available", es->drives().available(d)}});
    nlohmann::json pilot = nlohmann::json::array();
    for (size_t l = 0; l < st->pilot.size(); ++l)
      if (st->pilot[l].hinted)
        pilot.push_back({{"layer", l}, {"recall", st->pilot[l].recall()}, {"precision", st->pilot[l].precision()},
                         {"switched_off", st->pilot[l].off}, {"ranks_read", st->pilot[l].ranks_read}});
    j["streaming"] = {
        {"ram_budget_bytes", b.budget},
        {"spine_bytes", b.spine},
        {"fixed_overhead_bytes", b.overhead},
        {"context_tokens", b.context},
        {"sequence_bytes", b.sequence_bytes},
        {"slot_bytes", b.slot_bytes},
        {"slots", b.slots},
        {"pinned_slots", b.pinned_slots},
        {"expert_records", b.expert_records},
        {"expert_uses", st->expert_uses},
        {"hit_rate", {{"pinned", st->hits_pinned / uses}, {"cached", st->hits_cached / uses},
                      {"prefetched", st->hits_prefetched / uses}, {"missed", st->misses / uses}}},
        {"records_read", st->records_read},
        {"bytes_read", st->bytes_read},
        {"bytes_read_per_token", st->bytes_read / tokens},
        {"io_wait_s", st->io_wait_s},
        {"prefetch_issued", st->prefetch_issued},
        {"prefetch_cancelled", st->prefetch_cancelled},
        {"pilot", pilot},
        {"drives", drives}};
    if (at_first_token && s.decode_tokens > 0) {
      // The decode phase alone: what the drives delivered per second of decode.
      const uint64_t bytes = st->bytes_read - at_first_token->bytes_read;
      j["streaming"]["decode"] = {
          {"bytes_read", bytes},
          {"bytes_read_per_token", bytes / static_cast<uint64_t>(s.decode_tokens)},
          {"records_read", st->records_read - at_first_token->records_read},
          {"io_wait_s", st->io_wait_s - at_first_token->io_wait_s},
          {"read_GBps", s.decode_seconds > 0 ? bytes / s.decode_seconds / 1e9 : 0.0}};
    }
  }
  if (!a.stats_json.empty()) {
    std::ofstream out(a.stats_json, std::ios::trunc);
    if (!out) fail("--stats-json: cannot write {}", a.stats_json);
    out << j.dump(2) << "\n";
  }
  if (!a.stats) return;
  fmt::print(stderr, "--- stats ({} threads) ---\n", rt.pool().threads());
  fmt::print(stderr, "prefill   {} tokens, {:.1f} tok/s; TTFT {:.3f} s\n", s.prefill_tokens, s.prefill_tok_s(), ttft_s);
  fmt::print(stderr, "decode    {} tokens, {:.2f} tok/s\n", s.decode_tokens, s.decode_tok_s());
  fmt::print(stderr, "memory    peak RSS {}\n", format_bytes(static_cast<double>(peak_rss_bytes())));
  if (st) {
    const auto& sj = j["streaming"];
    const auto& hr = sj["hit_rate"];
    fmt::print(stderr, "budget    {} = spine {} + overhead {} + KV cache {} ({} tokens) + {} slots x {} ({} pinned)\n",
               rt.budget().budget ? format_bytes(static_cast<double>(rt.budget().budget)) : std::string("unlimited"),
               format_bytes(static_cast<double>(rt.budget().spine)),
               format_bytes(static_cast<double>(rt.budget().overhead)),
               format_bytes(static_cast<double>(rt.budget().sequence_bytes)), rt.budget().context, rt.budget().slots,
               format_bytes(static_cast<double>(rt.budget().slot_bytes)), rt.budget().pinned_slots);
    fmt::print(stderr, "experts   {} uses: pinned {:.1f}%, cached {:.1f}%, prefetched {:.1f}%, missed {:.1f}%\n",
               st->expert_uses, 100 * hr["pinned"].get<double>(), 100 * hr["cached"].get<double>(),
               100 * hr["prefetched"].get<double>(), 100 * hr["missed"].get<double>());
    fmt::print(stderr, "reads     {} records, {} ({} per token); waited {:.3f} s on I/O\n", st->records_read,
               format_bytes(static_cast<double>(st->bytes_read)),
               format_bytes(static_cast<double>(sj["bytes_read_per_token"].get<uint64_t>())), st->io_wait_s);
    if (sj.contains("decode")) {
      const auto& d = sj["decode"];
      fmt::print(stderr, "decoding  {} per token read at {:.2f} GB/s; waited {:.3f} s on I/O\n",
                 format_bytes(static_cast<double>(d["bytes_read_per_token"].get<uint64_t>())),
                 d["read_GBps"].get<double>(), d["io_wait_s"].get<double>());
    }
    uint64_t hinted = 0, needed = 0, correct = 0, off = 0;
    for (const auto& p : st->pilot) {
      hinted += p.hinted;
      needed += p.needed;
      correct += p.correct;
      off += p.off;
    }
    std::string ranks;
    for (size_t l = 0; l < st->pilot.size(); ++l)
      if (st->pilot[l].hinted) ranks += fmt::format("{}{}", ranks.empty() ? "" : " ", st->pilot[l].ranks_read);
    if (hinted)
      fmt::print(stderr, "pilot     top picks read per layer: {}\n", ranks);
    if (hinted)
      fmt::print(stderr, "pilot     recall {:.1f}%, precision {:.1f}% ({} hints, {} cancelled, {} layers switched off)\n",
                 100.0 * correct / std::max<uint64_t>(needed, 1), 100.0 * correct / hinted, hinted,
                 st->prefetch_cancelled, off);
    for (const auto& d : sj["drives"])
      fmt::print(stderr, "drive     {}: {}, {:.2f} GB/s over the run\n", d["dir"].get<std::string>(),
                 format_bytes(static_cast<double>(d["bytes_read"].get<uint64_t>())), d["read_GBps"].get<double>());
  }
}

}  // namespace deltafin::cli
