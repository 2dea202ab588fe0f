// dq-tool: checkpoint and tokenizer utilities (inspect, make-tiny, tokenize, detokenize, ...).
#include <CLI/CLI.hpp>

#include "common/logging.h"
#include "tools/dq_tool/commands.h"

int main(int argc, char** argv) {
  dq::LogToStderr();
  CLI::App app{"dq-tool: dqserve checkpoint and tokenizer utilities"};
  app.require_subcommand(1);
  int exit_code = 0;
  dq::tool::RegisterInspect(app, &exit_code);
  dq::tool::RegisterMakeTiny(app, &exit_code);
  dq::tool::RegisterTokenize(app, &exit_code);
  dq::tool::RegisterRunModel(app, &exit_code);
  dq::tool::RegisterFidelity(app, &exit_code);
  dq::tool::RegisterDFlash(app, &exit_code);
  CLI11_PARSE(app, argc, argv);
  return exit_code;
}
