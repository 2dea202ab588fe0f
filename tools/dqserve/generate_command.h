// `dqserve generate`: load a model and stream a chat answer (or an interactive chat).
#pragma once

#include <CLI/CLI.hpp>

namespace dq::cli {

void RegisterGenerate(CLI::App& app, int* exit_code);

}  // namespace dq::cli
