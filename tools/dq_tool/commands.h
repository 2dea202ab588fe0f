// dq-tool subcommands. Each Register* adds one subcommand to the app; its callback runs the
// command and returns the process exit code through `*exit_code`.
#pragma once

#include <CLI/CLI.hpp>

namespace dq::tool {

void RegisterInspect(CLI::App& app, int* exit_code);
void RegisterMakeTiny(CLI::App& app, int* exit_code);
void RegisterTokenize(CLI::App& app, int* exit_code);
void RegisterRunModel(CLI::App& app, int* exit_code);
void RegisterFidelity(CLI::App& app, int* exit_code);
void RegisterDFlash(CLI::App& app, int* exit_code);

}  // namespace dq::tool
