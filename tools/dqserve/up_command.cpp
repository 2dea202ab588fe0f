#include "tools/dqserve/up_command.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/cpu_matmul.h"
#include "common/deploy_config.h"
#include "common/listen_port.h"
#include "common/lm_head_format.h"
#include "common/random_token.h"
#include "common/worker_key.h"
#include "nlohmann/json.hpp"
#include "tools/dqserve/deployment_tls.h"
#include "tools/dqserve/process_group.h"

namespace dq::cli {
namespace {

constexpr char kDefaultModel[] = "models/SmolLM2-135M-Instruct.Q4_1.gguf";

struct UpOptions {
  std::string config;
  std::optional<int> port;  // overrides [router] port
  std::string log_level = "info";
  int startup_timeout_s = 300;
  bool print_commands = false;
  bool worker_tls = true;  // --no-worker-tls: plaintext gRPC between router and workers
};

std::string SiblingBinary(const char* name) {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return (self.parent_path() / name).string();
}

absl::StatusOr<DeployConfig> ResolveConfig(const UpOptions& o) {
  DeployConfig c;
  if (!o.config.empty()) {
    DQ_ASSIGN_OR_RETURN(c, LoadDeployConfig(o.config));
  } else {
    c.model = kDefaultModel;
  }
  if (o.port) {
    DQ_RETURN_IF_ERROR(CheckPort(*o.port, "--port"));
    c.router.port = *o.port;
  }
  if (!std::filesystem::exists(c.model)) {
    return absl::NotFoundError(absl::StrCat("model ", c.model, " not found; ",
                                            o.config.empty()
                                                ? "run scripts/setup.sh to download SmolLM2, "
                                                  "or pass --config FILE"
                                                : "fix \"model\" in the config"));
  }
  for (PhaseConfig* p : {&c.prefill, &c.decode}) {
    if (p->port != 0) continue;
    DQ_ASSIGN_OR_RETURN(p->port, PickFreePort("127.0.0.1"));
  }
  return c;
}

// Every port the deployment will listen on is free now: a port in use is named as such before
// anything starts, not found later as workers that never became healthy.
absl::Status CheckPortsFree(const DeployConfig& c) {
  struct Listener {
    const char* what;
    std::string host;
    int port;
  };
  const Listener listeners[] = {{"[router] port", c.router.host, c.router.port},
                                {"[router] grpc_port", c.router.host, c.router.grpc_port},
                                {"[prefill] port", "127.0.0.1", c.prefill.port},
                                {"[decode] port", "127.0.0.1", c.decode.port}};
  for (const Listener& l : listeners) {
    if (l.port == 0) continue;
    if (absl::Status s = ProbeListen(l.host, l.port); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat(l.what, ": ", s.message()));
    }
  }
  return absl::OkStatus();
}

std::vector<std::string> PhaseArgs(const DeployConfig& c, const PhaseConfig& p,
                                   const std::string& log_level) {
  std::vector<std::string> a = {"--model",     c.model,
                                "--compute",   p.compute,
                                "--device",    p.device,
                                "--host",      "127.0.0.1",
                                "--port",      std::to_string(p.port),
                                "--threads",   std::to_string(p.threads),
                                "--log-level", log_level};
  if (!p.weights.empty()) a.insert(a.end(), {"--weights", p.weights});
  if (p.kv_capacity > 0) a.insert(a.end(), {"--kv-capacity", std::to_string(p.kv_capacity)});
  // Only when not the workers' default, so the compose files' command lines stay equal.
  if (p.cpu_matmul != kDefaultCpuMatmul) a.insert(a.end(), {"--cpu-matmul", p.cpu_matmul});
  return a;
}

// The drafter's weights, for the decode worker and (the same) for the prefill worker.
std::vector<std::string> DrafterArgs(const PhaseConfig& d) {
  if (d.speculative == "dflash") return {"--draft-weights", d.draft_weights};
  if (d.speculative != "self") return {};
  std::vector<std::string> a;
  if (!d.draft_format.empty()) a.insert(a.end(), {"--draft-format", d.draft_format});
  if (!d.draft_weights.empty()) a.insert(a.end(), {"--draft-weights", d.draft_weights});
  if (d.draft_group_size > 0) {
    a.insert(a.end(), {"--draft-group-size", std::to_string(d.draft_group_size)});
  }
  return a;
}

// odp = true: the prefill worker also holds the decode weights (resident, for short prompts) and
// streams its own [prefill] weights for long ones (docs/odp.md).
std::vector<std::string> OdpArgs(const DeployConfig& c) {
  if (!c.odp.enabled) return {};
  std::vector<std::string> a = {"--odp-resident-weights",
                                c.decode.weights.empty() ? c.model : c.decode.weights,
                                "--odp-crossover",
                                std::to_string(c.odp.crossover_tokens),
                                "--odp-slots",
                                std::to_string(c.odp.slots),
                                "--odp-source",
                                c.odp.source};
  if (!c.odp.image_dir.empty()) a.insert(a.end(), {"--odp-image-dir", c.odp.image_dir});
  return a;
}

std::vector<ChildSpec> Children(const DeployConfig& c, const std::string& log_level) {
  ChildSpec decode{"decode", {SiblingBinary("dq-decode")}, {}};
  for (auto& s : PhaseArgs(c, c.decode, log_level)) decode.argv.push_back(s);
  decode.argv.insert(decode.argv.end(), {"--transport", c.transfer.backend, "--max-batch",
                                         std::to_string(c.decode.max_batch), "--lease-ttl-ms",
                                         std::to_string(c.decode.lease_ttl_ms)});
  // Only when on, so the compose files' decode command lines (which run without) stay equal.
  if (c.decode.speculative != "none") {
    decode.argv.insert(decode.argv.end(), {"--speculative", c.decode.speculative, "--spec-k",
                                           std::to_string(c.decode.spec_k)});
  }
  const std::vector<std::string> drafter = DrafterArgs(c.decode);
  decode.argv.insert(decode.argv.end(), drafter.begin(), drafter.end());
  if (c.decode.batch_invariant) decode.argv.push_back("--batch-invariant");
  if (!KeepsStoredLmHead(c.decode.lm_head)) {
    decode.argv.insert(decode.argv.end(), {"--lm-head", c.decode.lm_head});
  }
  if (!c.prefix_cache.assistant_kv.empty()) {
    decode.argv.insert(decode.argv.end(),
                       {"--prefix-cache", "--assistant-kv", c.prefix_cache.assistant_kv});
  }
  ChildSpec prefill{"prefill", {SiblingBinary("dq-prefill")}, {}};
  for (auto& s : PhaseArgs(c, c.prefill, log_level)) prefill.argv.push_back(s);
  // The same drafter on the prefill worker: it ships the drafter's prompt KV with the target's.
  if (c.decode.draft_on_prefill && !drafter.empty()) {
    prefill.argv.insert(prefill.argv.end(), {"--speculative", c.decode.speculative});
    prefill.argv.insert(prefill.argv.end(), drafter.begin(), drafter.end());
  }
  prefill.argv.insert(
      prefill.argv.end(),
      {"--transports", c.transfer.backend, "--token-budget", std::to_string(c.prefill.token_budget),
       "--io-timeout-ms", std::to_string(c.transfer.io_timeout_ms)});
  for (auto& s : OdpArgs(c)) prefill.argv.push_back(s);
  if (c.prefix_cache.enabled) prefill.argv.push_back("--prefix-cache");
  // Only when on, as --batch-invariant (the compose files run without).
  if (c.prefill.attention != "bf16") {
    prefill.argv.insert(prefill.argv.end(), {"--attention", c.prefill.attention});
  }
  const RouterConfig& r = c.router;
  ChildSpec router{"router",
                   {SiblingBinary("dq-router"),
                    "--model",
                    c.model,
                    "--host",
                    r.host,
                    "--port",
                    std::to_string(r.port),
                    "--grpc-port",
                    std::to_string(r.grpc_port),
                    "--prefill",
                    absl::StrCat("127.0.0.1:", c.prefill.port),
                    "--decode",
                    absl::StrCat("127.0.0.1:", c.decode.port),
                    "--max-in-flight",
                    std::to_string(r.max_in_flight),
                    "--max-queue",
                    std::to_string(r.max_queue),
                    "--queue-timeout-ms",
                    std::to_string(r.queue_timeout_ms),
                    "--request-timeout-ms",
                    std::to_string(r.request_timeout_ms),
                    "--max-body-bytes",
                    std::to_string(r.max_body_bytes),
                    "--log-level",
                    log_level},
                   {}};
  if (!c.served_model_name.empty()) {
    router.argv.insert(router.argv.end(), {"--served-model-name", c.served_model_name});
  }
  // Only when on, so the compose files' router command lines (which run without) stay equal.
  if (r.special_tokens_in_content) router.argv.push_back("--special-tokens-in-content");
  if (r.tool_call_parser != "auto") {
    router.argv.insert(router.argv.end(), {"--tool-call-parser", r.tool_call_parser});
  }
  // The key travels in the environment, never on a command line that `ps` shows.
  const char* key = r.api_key_env.empty() ? nullptr : std::getenv(r.api_key_env.c_str());
  if (key != nullptr && *key != '\0') router.env.push_back(absl::StrCat("DQ_API_KEY=", key));
  return {decode, prefill, router};
}

// Starts the children in order, each once the previous one listens.
absl::Status StartAll(ProcessGroup& group, const DeployConfig& c, const UpOptions& o,
                      const std::vector<ChildSpec>& children) {
  const int ports[] = {c.decode.port, c.prefill.port, c.router.port};
  const std::string hosts[] = {"127.0.0.1", "127.0.0.1",
                               c.router.host == "0.0.0.0" ? "127.0.0.1" : c.router.host};
  for (size_t i = 0; i < children.size(); ++i) {
    DQ_RETURN_IF_ERROR(group.Start(children[i]));
    const std::string& name = children[i].name;
    absl::Status s = WaitForPort(hosts[i], ports[i], std::chrono::seconds(o.startup_timeout_s),
                                 [&] { return group.Reap().empty() && group.Running(name); });
    if (!s.ok()) {
      return absl::UnavailableError(absl::StrCat("the ", name, " process did not start (",
                                                 s.message(), "); its output is above"));
    }
  }
  // Ready when the router says its workers are healthy (it probes them on start).
  for (int i = 0; i < 100; ++i) {
    absl::StatusOr<int> code =
        HttpGetStatus(hosts[2], c.router.port, "/health", std::chrono::milliseconds(1000));
    if (code.ok() && *code == 200) return absl::OkStatus();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return absl::UnavailableError("the router did not report healthy workers within 10 s");
}

// A child that dies is started again after a delay that doubles while it keeps dying soon after
// starting: 1 s, 2 s, 4 s ... 30 s; a child that ran for a minute starts over at 1 s.
struct Restarts {
  using Clock = std::chrono::steady_clock;
  int attempts = 0;
  Clock::time_point started_at = Clock::now();
  std::optional<Clock::time_point> due;  // dead, to be started then

  std::chrono::milliseconds Died(Clock::time_point now) {
    if (now - started_at >= std::chrono::minutes(1)) attempts = 0;
    const std::chrono::milliseconds delay(
        std::min<int64_t>(1000LL << std::min(attempts, 5), 30000));
    ++attempts;
    due = now + delay;
    return delay;
  }
};

// Keeps the deployment up until Ctrl-C / SIGTERM (returns 0): a dead child is reported and
// restarted with its own command line (the same ports), while the router answers 503 for a role
// with no live worker and /health names it; the deployment stops only when asked.
int Supervise(ProcessGroup& group, const sigset_t& signals,
              const std::vector<ChildSpec>& children) {
  std::map<std::string, Restarts> restarts;
  while (true) {
    timespec tick{0, 200 * 1000 * 1000};
    const int sig = sigtimedwait(&signals, nullptr, &tick);
    if (sig == SIGINT || sig == SIGTERM) {
      std::fprintf(stderr, "dqserve: stopping (signal %d)\n", sig);
      return 0;
    }
    const auto now = Restarts::Clock::now();
    for (const ChildExit& e : group.Reap()) {
      const std::chrono::milliseconds delay = restarts[e.name].Died(now);
      std::fprintf(stderr, "dqserve: the %s process %s; restarting it in %.0f s (restart %d)\n",
                   e.name.c_str(), e.how.c_str(), delay.count() / 1000.0,
                   restarts[e.name].attempts);
    }
    for (const ChildSpec& spec : children) {
      Restarts& r = restarts[spec.name];
      if (!r.due || now < *r.due) continue;
      r.due.reset();
      r.started_at = now;
      if (absl::Status s = group.Start(spec); !s.ok()) {
        std::fprintf(stderr, "dqserve: cannot restart the %s process: %s\n", spec.name.c_str(),
                     std::string(s.message()).c_str());
        r.Died(now);
      }
    }
  }
}

// --print-commands: what StartAll would run, one JSON object a line, starting nothing (the
// deployment tests compare container command lines with it where the processes cannot run).
int PrintCommands(const DeployConfig& c, const UpOptions& o) {
  for (const ChildSpec& child : Children(c, o.log_level)) {
    nlohmann::json line = {{"name", child.name}, {"argv", child.argv}};
    std::printf("%s\n", line.dump().c_str());
  }
  return 0;
}

int RunUp(const UpOptions& o) {
  absl::StatusOr<DeployConfig> c = ResolveConfig(o);
  if (!c.ok()) {
    std::fprintf(stderr, "dqserve up: %s\n", std::string(c.status().message()).c_str());
    return 2;
  }
  if (o.print_commands) return PrintCommands(*c, o);
  // Signals are taken synchronously (sigtimedwait), so block them before any thread starts.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGCHLD);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  if (absl::Status s = CheckPortsFree(*c); !s.ok()) {
    std::fprintf(stderr, "dqserve up: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  // One worker credential per deployment, the same for every (re)start of its processes: only
  // this router can call these workers (common/worker_key.h).
  std::vector<ChildSpec> children = Children(*c, o.log_level);
  const std::string worker_key = absl::StrCat(kWorkerKeyEnv, "=", RandomHex(32));
  for (ChildSpec& child : children) child.env.push_back(worker_key);
  // And one TLS identity, so that key never crosses a socket in clear (common/worker_tls.h).
  std::unique_ptr<DeploymentTls> tls;
  if (o.worker_tls) {
    absl::StatusOr<std::unique_ptr<DeploymentTls>> made = DeploymentTls::Create();
    if (!made.ok()) {
      std::fprintf(stderr, "dqserve up: %s\n", std::string(made.status().message()).c_str());
      return 1;
    }
    tls = std::move(*made);
    for (ChildSpec& child : children) {
      const std::vector<std::string> env =
          child.name == "router" ? tls->router_env() : tls->worker_env();
      child.env.insert(child.env.end(), env.begin(), env.end());
    }
  }
  ProcessGroup group;
  int rc = 0;
  if (absl::Status s = StartAll(group, *c, o, children); !s.ok()) {
    std::fprintf(stderr, "dqserve up: %s\n", std::string(s.message()).c_str());
    rc = 1;
  } else {
    std::fprintf(stderr,
                 "dqserve: serving %s at http://%s:%d (OpenAI API: /v1/chat/completions, "
                 "/v1/completions); prefill on 127.0.0.1:%d, decode on 127.0.0.1:%d; Ctrl-C "
                 "stops\n",
                 c->model.c_str(), c->router.host.c_str(), c->router.port, c->prefill.port,
                 c->decode.port);
    rc = Supervise(group, signals, children);
  }
  for (const std::string& name : group.StopAll(std::chrono::seconds(10))) {
    std::fprintf(stderr, "dqserve: the %s process did not stop in 10 s and was killed\n",
                 name.c_str());
  }
  return rc;
}

}  // namespace

void RegisterUp(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<UpOptions>();
  CLI::App* cmd = app.add_subcommand(
      "up", "serve a model: router + prefill worker + decode worker as local processes");
  cmd->add_option("--config", o->config,
                  "deployment TOML (see deploy/local.toml); default: SmolLM2 on the CPU, port "
                  "8000");
  cmd->add_option("--port", o->port, "router HTTP port (overrides the config)");
  cmd->add_option("--worker-log-level", o->log_level, "log level of the child processes");
  cmd->add_option("--startup-timeout", o->startup_timeout_s, "seconds to wait for each process");
  cmd->add_flag("--print-commands", o->print_commands,
                "print each process's command line (one JSON object a line: name, argv; the API "
                "key never appears) and exit without starting anything");
  cmd->add_flag("!--no-worker-tls", o->worker_tls,
                "plaintext gRPC between the router and the workers (default: TLS with a "
                "certificate made for this deployment; needs the openssl command)");
  cmd->callback([o, exit_code] { *exit_code = RunUp(*o); });
}

}  // namespace dq::cli
