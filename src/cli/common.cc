#include "cli/common.h"

#include "util/error.h"

namespace deltafin::cli {

void add_model_options(CLI::App* cmd, ModelArgs& a) {
  cmd->add_option("--model", a.model, "Hugging Face model directory")->required();
  cmd->add_option("--threads", a.threads, "compute threads (default: all cores)")->check(CLI::Range(0, 1024));
}

LoadedModel load(const ModelArgs& a) {
  LoadedModel m;
  m.ck = Checkpoint::open(a.model);
  m.pool = std::make_unique<ThreadPool>(a.threads > 0 ? a.threads : default_thread_count());
  ModelOptions opts;
  opts.pool = m.pool.get();
  m.model = load_model(*m.ck, opts);
  return m;
}

}  // namespace deltafin::cli
