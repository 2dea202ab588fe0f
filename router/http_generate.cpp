// POST /v1/chat/completions and POST /v1/completions: parse, tokenize, start the request
// (admission + prefill, whose failures still get a proper status line), then decode into one
// JSON body or an SSE stream.
#include <memory>
#include <span>
#include <string>
#include <utility>

#include "router/auth_and_limits.h"
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

// A streamed request's writes. A failed write means the client is gone.
struct SseWriter {
  HttpResponder& res;
  bool ok = true;
  bool Write(const std::string& s) {
    if (ok && !s.empty()) ok = res.Write(s);
    return ok;
  }
};

// After streaming began, an error is an event followed by [DONE] (nobody reads a cancelled one).
void EndWithError(SseWriter& w, const GenerationResult& r) {
  if (r.outcome == Outcome::kCancelled) return;
  w.Write(SseError(*r.error));
  w.Write(SseDone());
}

// The decode phase of a streamed request: each delta with text (or logprobs) as `chunk(delta)`,
// then `tail(result)` (what is still held back, and the finish chunk), the usage chunk and
// [DONE], or the error event.
template <typename Stream, typename Chunk, typename Tail>
void StreamDecode(SseWriter& w, ActiveRequest& active, Stream& stream, bool logprobs,
                  const Chunk& chunk, const Tail& tail) {
  GenerationResult r = active.Run([&](const Delta& d) {
    if (d.text.empty() && !logprobs) return true;  // text held back: nothing to send
    return w.Write(chunk(d));
  });
  if (r.error) return EndWithError(w, r);
  w.Write(tail(r));
  w.Write(stream.UsageChunk(r.usage));
  w.Write(SseDone());
}

// A streamed chat completion after its role chunk: content and tool calls through `tools`.
void StreamChat(SseWriter& w, ActiveRequest& active, ChatCompletionStream& stream,
                ToolCallStream& tools, const Tokenizer& tok, bool logprobs) {
  StreamDecode(
      w, active, stream, logprobs,
      [&](const Delta& d) { return tools.Events(d, DeltaLogprobs(tok, d), stream); },
      [&](const GenerationResult& r) { return tools.FinishEvents(r.finish_reason, stream); });
}

// The event stream's head (chunked for HTTP/1.1, close-delimited for 1.0: the listener's part).
bool StartSse(HttpResponder& res) {
  return res.StartStream("text/event-stream",
                         {{"Cache-Control", "no-cache"},
                          {"X-Accel-Buffering", "no"}});  // proxies must not hold events back
}

}  // namespace

std::shared_ptr<ActiveRequest> HttpServer::Start(ApiResult<GenerationInput> input,
                                                 const std::string& request_id,
                                                 HttpResponder& res) {
  if (!input.ok()) {
    BadRequest(res, input.error());
    return nullptr;
  }
  GenerationInput in = std::move(input).value();
  in.request_id = request_id;
  StartResult start = pipeline_.Start(std::move(in));
  if (!start.ok()) {
    res.Reply(ErrorReply(start.error, start.retry_after));
    return nullptr;
  }
  return std::move(start.request);
}

void HttpServer::Chat(const HttpRequest& req, HttpResponder& res) {
  if (auto e = CheckBodySize(req.body.size(), options_.max_body_bytes)) return BadRequest(res, *e);
  ApiResult<ChatCompletionRequest> parsed = ParseChatCompletionRequest(req.body, parse_options_);
  if (!parsed.ok()) return BadRequest(res, parsed.error());
  const ChatCompletionRequest& c = *parsed;
  ResponseHeader header = NewResponseHeader(ApiEndpoint::kChatCompletions, c.model);
  std::shared_ptr<ActiveRequest> active =
      Start(ChatGeneration(c, pipeline_.model()), header.id, res);
  if (!active) return;
  const Tokenizer& tok = pipeline_.model().tokenizer;
  const bool logprobs = c.logprobs;
  ToolCallStream tools = ToolCallStream::For(c, pipeline_.model());

  if (!c.stream) {
    ChatChoice choice;
    if (logprobs) choice.logprobs.emplace();
    GenerationResult r = active->Run([&](const Delta& d) {
      tools.Add(d, &choice);
      if (logprobs) {
        for (const auto& lp : d.logprobs) choice.logprobs->push_back(ToTokenLogprobs(tok, lp));
      }
      return !res.ClientGone();  // nobody waits for the rest
    });
    active.reset();  // free the slot before writing the body
    if (r.error) return res.Reply(ErrorReply(*r.error));
    tools.Finish(r.finish_reason, &choice);
    return res.Reply(
        HttpReply{200, "application/json", ChatCompletionJson(header, choice, r.usage), {}});
  }
  if (!StartSse(res)) return;
  SseWriter w{res};
  ChatCompletionStream stream(header, c.include_usage, logprobs);
  if (w.Write(stream.RoleChunk())) StreamChat(w, *active, stream, tools, tok, logprobs);
  active.reset();  // free the slot before the stream's end
  res.EndStream();
}

void HttpServer::Completions(const HttpRequest& req, HttpResponder& res) {
  if (auto e = CheckBodySize(req.body.size(), options_.max_body_bytes)) return BadRequest(res, *e);
  ApiResult<CompletionRequest> parsed = ParseCompletionRequest(req.body, parse_options_);
  if (!parsed.ok()) return BadRequest(res, parsed.error());
  const CompletionRequest& c = *parsed;
  ResponseHeader header = NewResponseHeader(ApiEndpoint::kCompletions, c.model);
  std::shared_ptr<ActiveRequest> active =
      Start(CompletionGeneration(c, pipeline_.model()), header.id, res);
  if (!active) return;
  const Tokenizer& tok = pipeline_.model().tokenizer;
  const bool logprobs = c.logprobs.has_value();
  const std::string echo_text = c.echo ? pipeline_.model().PromptText(c) : "";
  std::vector<TokenLogprobs> echo_logprobs;
  if (c.echo && logprobs) {
    echo_logprobs = PromptTokenLogprobs(tok, active->prompt_ids(), active->prompt_logprobs());
  }

  if (!c.stream) {
    CompletionChoice choice;
    if (logprobs) choice.logprobs.emplace();
    GenerationResult r = active->Run([&](const Delta& d) {
      choice.text += d.text;
      if (logprobs) {
        for (const auto& lp : d.logprobs) choice.logprobs->push_back(ToTokenLogprobs(tok, lp));
      }
      return !res.ClientGone();
    });
    active.reset();
    if (r.error) return res.Reply(ErrorReply(*r.error));
    choice.finish_reason = r.finish_reason;
    if (c.echo) PrependEcho(echo_text, std::move(echo_logprobs), &choice);
    return res.Reply(
        HttpReply{200, "application/json", CompletionJson(header, choice, r.usage), {}});
  }
  if (!StartSse(res)) return;
  SseWriter w{res};
  CompletionStream stream(header, c.include_usage, logprobs);
  if (!c.echo || w.Write(stream.TextChunk(echo_text, echo_logprobs))) {
    StreamDecode(
        w, *active, stream, logprobs,
        [&](const Delta& d) { return stream.TextChunk(d.text, DeltaLogprobs(tok, d)); },
        [&](const GenerationResult& r) { return stream.FinishChunk(r.finish_reason); });
  }
  active.reset();  // free the slot before the stream's end
  res.EndStream();
}

}  // namespace dq::router
