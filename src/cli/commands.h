// The `deltafin` subcommands. Each command file defines one register_*
// function that adds its subcommand (options and callback) to the app.
#pragma once

#include <CLI/CLI.hpp>

namespace deltafin::cli {

void register_score(CLI::App& app);
void register_generate(CLI::App& app);
void register_inspect(CLI::App& app);
void register_pack(CLI::App& app);
void register_chat(CLI::App& app);
void register_verify(CLI::App& app);
void register_synth(CLI::App& app);
void register_tokenize(CLI::App& app);
void register_detokenize(CLI::App& app);

}  // namespace deltafin::cli
