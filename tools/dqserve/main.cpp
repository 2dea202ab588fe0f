// dqserve: the single-machine entry point: `dqserve up` (a local deployment) and
// `dqserve generate` (one process, no server).
#include <CLI/CLI.hpp>

#include "common/logging.h"
#include "tools/dqserve/generate_command.h"
#include "tools/dqserve/up_command.h"

int main(int argc, char** argv) {
  dq::LogToStderr();
  CLI::App app{"dqserve: LLM serving with disaggregated quantization"};
  app.require_subcommand(1);
  std::string log_level = "warn";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error, off");
  app.parse_complete_callback([&] { dq::SetLogLevel(log_level); });
  int exit_code = 0;
  dq::cli::RegisterGenerate(app, &exit_code);
  dq::cli::RegisterUp(app, &exit_code);
  CLI11_PARSE(app, argc, argv);
  return exit_code;
}
