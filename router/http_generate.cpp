// POST /v1/chat/completions and POST /v1/completions: parse, tokenize, then run the request's
// choices (n of each prompt, choice_fanout.h) into one JSON body or an SSE stream. A failure
// before any choice started still gets a proper status line; after the stream began it is an
// error event.
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "router/auth_and_limits.h"
#include "router/choice_fanout.h"
#include "router/generation_input.h"
#include "router/http_server.h"
#include "router/openai_response.h"
#include "router/tool_call_stream.h"

namespace dq::router {
namespace {

std::vector<TokenLogprobs> DeltaLogprobs(const Tokenizer& tok, const Delta& d) {
  std::vector<TokenLogprobs> out;
  out.reserve(d.logprobs.size());
  for (const auto& lp : d.logprobs) out.push_back(ToTokenLogprobs(tok, lp));
  return out;
}

// One choice's usage into the request's: the prompt once per prompt (its first choice), the
// completion tokens of every choice.
void AddUsage(const Usage& u, bool counts_prompt, Usage* total) {
  if (counts_prompt) {
    total->prompt_tokens += u.prompt_tokens;
    total->cached_tokens += u.cached_tokens;
  }
  total->completion_tokens += u.completion_tokens;
  if (!u.speculative) return;
  if (!total->speculative) total->speculative.emplace();
  total->speculative->steps += u.speculative->steps;
  total->speculative->drafted += u.speculative->drafted;
  total->speculative->accepted += u.speculative->accepted;
  total->speculative->drafter_prompt = u.speculative->drafter_prompt;
}

// A streamed request's writes; the event stream's head goes out before the first event (so a
// failure before any choice started can still be a status line). A failed write means the
// client is gone.
struct SseWriter {
  HttpResponder& res;
  bool started = false;
  bool ok = true;
  bool Write(const std::string& s) {
    if (!started) {
      started = true;
      // Chunked for HTTP/1.1, close-delimited for 1.0 (the listener's part); proxies must not
      // hold events back.
      ok = res.StartStream("text/event-stream",
                           {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}});
    }
    if (ok && !s.empty()) ok = res.Write(s);
    return ok;
  }
  // The stream's end: the usage chunk (may be empty) and [DONE], or the error event.
  void End(const FanoutOutcome& out, const std::string& usage_chunk, const HttpReply& error_reply) {
    if (!started && !out.ok()) return res.Reply(error_reply);
    if (out.ok()) {
      Write(usage_chunk);
    } else if (ok && !res.ClientGone()) {
      Write(SseError(*out.error));
    }
    Write(SseDone());
    if (ok) res.EndStream();
  }
};

}  // namespace

void HttpServer::Chat(const HttpRequest& req, HttpResponder& res) {
  if (auto e = CheckBodySize(req.body.size(), options_.max_body_bytes)) return BadRequest(res, *e);
  ApiResult<ChatCompletionRequest> parsed = ParseChatCompletionRequest(req.body, parse_options_);
  if (!parsed.ok()) return BadRequest(res, parsed.error());
  const ChatCompletionRequest& c = *parsed;
  ResponseHeader header = NewResponseHeader(ApiEndpoint::kChatCompletions, c.model);
  ApiResult<GenerationInput> input = ChatGeneration(c, pipeline_.model());
  if (!input.ok()) return BadRequest(res, input.error());
  std::vector<GenerationInput> prompts;
  prompts.push_back(std::move(input).value());
  std::vector<GenerationInput> inputs = FanoutInputs(std::move(prompts), c.n, header.id);
  const Tokenizer& tok = pipeline_.model().tokenizer;
  const bool logprobs = c.logprobs;
  std::vector<ChatChoice> choices(inputs.size());
  std::vector<ToolCallStream> tools;
  std::vector<ChatCompletionStream> streams;
  for (size_t i = 0; i < inputs.size(); ++i) {
    tools.push_back(ToolCallStream::For(c, pipeline_.model()));
    streams.emplace_back(header, c.include_usage, logprobs, static_cast<int>(i));
    if (logprobs) choices[i].logprobs.emplace();
  }
  Usage usage;
  SseWriter w{res};
  FanoutCallbacks cb;
  cb.started = [&](size_t i, ActiveRequest&) {
    return c.stream ? w.Write(streams[i].RoleChunk()) : !res.ClientGone();
  };
  cb.delta = [&](size_t i, const Delta& d) {
    if (!c.stream) {
      tools[i].Add(d, &choices[i]);
      if (logprobs) {
        for (const auto& lp : d.logprobs) choices[i].logprobs->push_back(ToTokenLogprobs(tok, lp));
      }
      return !res.ClientGone();  // nobody waits for the rest
    }
    if (d.text.empty() && !logprobs) return true;  // text held back: nothing to send
    return w.Write(tools[i].Events(d, DeltaLogprobs(tok, d), streams[i]));
  };
  cb.done = [&](size_t i, const GenerationResult& r) {
    AddUsage(r.usage, i % c.n == 0, &usage);
    if (c.stream) {
      w.Write(tools[i].FinishEvents(r.finish_reason, streams[i]));
    } else {
      tools[i].Finish(r.finish_reason, &choices[i]);
    }
  };
  FanoutOutcome out = RunFanout(pipeline_, std::move(inputs), scheduler_.max_in_flight(), cb);
  const HttpReply error_reply = out.ok() ? HttpReply{} : ErrorReply(*out.error, out.retry_after);
  if (c.stream) return w.End(out, streams[0].UsageChunk(usage), error_reply);
  if (!out.ok()) return res.Reply(error_reply);
  res.Reply(HttpReply{200, "application/json", ChatCompletionJson(header, choices, usage), {}});
}

namespace {

// The per-prompt GenerationInputs of a completions request.
ApiResult<std::vector<GenerationInput>> CompletionInputs(const CompletionRequest& c,
                                                         const ServedModel& model) {
  std::vector<GenerationInput> prompts;
  for (size_t i = 0; i < c.prompt_count(); ++i) {
    ApiResult<GenerationInput> in = CompletionGeneration(c.ForPrompt(i), model);
    if (!in.ok()) return in.error();
    prompts.push_back(std::move(in).value());
  }
  return prompts;
}

}  // namespace

void HttpServer::Completions(const HttpRequest& req, HttpResponder& res) {
  if (auto e = CheckBodySize(req.body.size(), options_.max_body_bytes)) return BadRequest(res, *e);
  ApiResult<CompletionRequest> parsed = ParseCompletionRequest(req.body, parse_options_);
  if (!parsed.ok()) return BadRequest(res, parsed.error());
  const CompletionRequest& c = *parsed;
  ResponseHeader header = NewResponseHeader(ApiEndpoint::kCompletions, c.model);
  auto prompts = CompletionInputs(c, pipeline_.model());
  if (!prompts.ok()) return BadRequest(res, prompts.error());
  std::vector<GenerationInput> inputs = FanoutInputs(std::move(prompts).value(), c.n, header.id);
  const Tokenizer& tok = pipeline_.model().tokenizer;
  const bool logprobs = c.logprobs.has_value();
  std::vector<CompletionChoice> choices(inputs.size());
  std::vector<CompletionStream> streams;
  std::vector<std::string> echo_texts(inputs.size());
  std::vector<std::vector<TokenLogprobs>> echo_logprobs(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    streams.emplace_back(header, c.include_usage, logprobs, static_cast<int>(i));
    if (logprobs) choices[i].logprobs.emplace();
    if (c.echo) echo_texts[i] = pipeline_.model().PromptText(c.ForPrompt(i / c.n));
  }
  Usage usage;
  SseWriter w{res};
  FanoutCallbacks cb;
  cb.started = [&](size_t i, ActiveRequest& active) {
    if (c.echo && logprobs) {
      echo_logprobs[i] = PromptTokenLogprobs(tok, active.prompt_ids(), active.prompt_logprobs());
    }
    if (!c.stream) return !res.ClientGone();
    return !c.echo ? w.Write("") : w.Write(streams[i].TextChunk(echo_texts[i], echo_logprobs[i]));
  };
  cb.delta = [&](size_t i, const Delta& d) {
    if (!c.stream) {
      choices[i].text += d.text;
      if (logprobs) {
        for (const auto& lp : d.logprobs) choices[i].logprobs->push_back(ToTokenLogprobs(tok, lp));
      }
      return !res.ClientGone();
    }
    if (d.text.empty() && !logprobs) return true;
    return w.Write(streams[i].TextChunk(d.text, DeltaLogprobs(tok, d)));
  };
  cb.done = [&](size_t i, const GenerationResult& r) {
    AddUsage(r.usage, i % c.n == 0, &usage);
    if (c.stream) {
      w.Write(streams[i].FinishChunk(r.finish_reason));
      return;
    }
    choices[i].finish_reason = r.finish_reason;
    if (c.echo) PrependEcho(echo_texts[i], std::move(echo_logprobs[i]), &choices[i]);
  };
  FanoutOutcome out = RunFanout(pipeline_, std::move(inputs), scheduler_.max_in_flight(), cb);
  const HttpReply error_reply = out.ok() ? HttpReply{} : ErrorReply(*out.error, out.retry_after);
  if (c.stream) return w.End(out, streams[0].UsageChunk(usage), error_reply);
  if (!out.ok()) return res.Reply(error_reply);
  res.Reply(HttpReply{200, "application/json", CompletionJson(header, choices, usage), {}});
}

}  // namespace dq::router
