// `dqserve up`: a whole local deployment (router + one prefill worker + one decode worker) as
// child processes, from one TOML file (see common/deploy_config.h, deploy/local.toml).
#pragma once

#include <CLI/CLI.hpp>

namespace dq::cli {

void RegisterUp(CLI::App& app, int* exit_code);

}  // namespace dq::cli
