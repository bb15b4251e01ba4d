// The `deltafin` subcommands. Each command file defines one register_*
// function that adds its subcommand (options and callback) to the app.
#pragma once

#include <CLI/CLI.hpp>

namespace deltafin::cli {

void register_score(CLI::App& app);
void register_generate(CLI::App& app);
void register_inspect(CLI::App& app);

}  // namespace deltafin::cli
