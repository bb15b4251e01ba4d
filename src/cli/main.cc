// deltafin: exact MoE inference with experts streamed from NVMe.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdio>
#include <exception>

#include "cli/commands.h"
#include "util/error.h"

int main(int argc, char** argv) {
  CLI::App app{"deltafin: exact Mixture-of-Experts inference, experts streamed from NVMe"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "deltafin 0.1.0");
  deltafin::cli::register_score(app);
  deltafin::cli::register_generate(app);
  deltafin::cli::register_inspect(app);
  deltafin::cli::register_pack(app);
  deltafin::cli::register_chat(app);
  deltafin::cli::register_verify(app);
  deltafin::cli::register_synth(app);
  deltafin::cli::register_tokenize(app);
  deltafin::cli::register_detokenize(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const deltafin::Error& e) {
    fmt::print(stderr, "deltafin: {}\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    fmt::print(stderr, "deltafin: out of memory; lower --ram-budget or use a machine with more RAM\n");
    return 1;
  }
  return 0;
}
