// deltafin pack / verify: build a store of expert records, re-check one.
#include <fmt/format.h>

#include <sstream>

#include "cli/commands.h"
#include "engine/pack.h"
#include "util/error.h"
#include "util/timer.h"

namespace deltafin::cli {

void register_pack(CLI::App& app) {
  struct Args {
    PackOptions o;
    std::string drives;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("pack", "write a checkpoint's routed experts into a store on drive directories");
  cmd->add_option("--model", a->o.model_dir, "Hugging Face model directory")->required();
  cmd->add_option("--out", a->o.out_dir, "store directory (manifest.json, heat.json)")->required();
  cmd->add_option("--drives", a->drives, "drive directories, comma-separated (one per physical drive)")->required();
  cmd->add_option("--placement", a->o.placement, "stripe (default), mirror or hot-replicas");
  cmd->add_option("--hot-fraction", a->o.hot_fraction, "hot-replicas: share of records mirrored on every drive")
      ->check(CLI::Range(0.0, 1.0));
  cmd->callback([a] {
    std::stringstream ss(a->drives);
    std::string d;
    while (std::getline(ss, d, ','))
      if (!d.empty()) a->o.drives.push_back(d);
    pack_store(a->o);
  });
}

void register_verify(CLI::App& app) {
  auto dir = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("verify", "re-read every record of a store and check its checksum");
  cmd->add_option("store", *dir, "store directory")->required();
  cmd->callback([dir] {
    Stopwatch sw, tick;
    uint64_t n = verify_store(*dir, [&](uint64_t done, uint64_t total) {
      if (tick.seconds() > 1) {
        fmt::print(stderr, "\rverify: {}/{} records   ", done, total);
        tick.reset();
      }
    });
    fmt::print(stderr, "\rverify: {} records, every checksum matches ({:.1f} s)\n", n, sw.seconds());
  });
}

}  // namespace deltafin::cli
