#include "serve/terminal_chat.h"

#include <fmt/format.h>

#include <chrono>
#include <istream>
#include <memory>
#include <ostream>
#include <vector>

#include "serve/metrics.h"
#include "serve/openai/service.h"
#include "serve/scheduler.h"

namespace orchard::serve {
namespace {

constexpr std::string_view kDim = "\x1b[2m";
constexpr std::string_view kPlain = "\x1b[0m";

std::string trimmed(const std::string& s) {
  const size_t begin = s.find_first_not_of(" \t\r\n");
  if (begin == std::string::npos) return {};
  return s.substr(begin, s.find_last_not_of(" \t\r\n") - begin + 1);
}

struct Reply {
  std::string text;  // the content: what the history keeps
  FinishReason reason = FinishReason::Stop;
  Usage usage;
  std::string error;
};

// Writes a reply as it streams: its reasoning (when shown) in a block of its own, then its
// content.
class ReplyWriter {
 public:
  ReplyWriter(std::ostream& out, const TerminalChatOptions& o) : out_(out), o_(o) {}

  void add(const structured::ReplyDelta& d, Reply& reply) {
    if (!d.reasoning.empty() && o_.show_thinking) {
      if (!thinking_) {
        thinking_ = true;
        if (o_.dim) out_ << kDim;
        out_ << "Thinking...\n";
      }
      out_ << d.reasoning;
    }
    if (!d.content.empty()) {
      close_thinking();
      out_ << d.content;
      reply.text += d.content;
    }
    out_.flush();
  }
  // Ends the reasoning block, if one is open (a reply stopped while thinking, too: the
  // terminal must not stay dimmed).
  void close_thinking() {
    if (!thinking_) return;
    thinking_ = false;
    out_ << "\n...done thinking.\n\n";
    if (o_.dim) out_ << kPlain;
  }

 private:
  std::ostream& out_;
  const TerminalChatOptions& o_;
  bool thinking_ = false;
};

// Streams the job's text to `out` as it comes; Ctrl-C cancels it (what was written stays the
// reply). With a reply parser, reasoning and content are told apart.
Reply stream_reply(Job& job, const std::shared_ptr<structured::ToolCallParser>& parser, std::ostream& out,
                   const TerminalChatOptions& o, std::atomic<bool>& interrupted) {
  Reply reply;
  ReplyWriter writer(out, o);
  for (;;) {
    if (interrupted.exchange(false)) job.cancel();
    const JobUpdate u = job.wait(std::chrono::milliseconds(100));
    if (parser) {
      writer.add(parser->push(u.text), reply);
    } else {
      structured::ReplyDelta d;
      d.content = u.text;
      writer.add(d, reply);
    }
    if (u.finished) {
      if (parser) writer.add(parser->finish().last, reply);
      writer.close_thinking();
      reply.reason = u.finish_reason;
      reply.usage = u.usage;
      reply.error = u.error;
      return reply;
    }
  }
}

}  // namespace

void converse(Engine& engine, ChatFamily family, const TerminalChatOptions& o, std::istream& in, std::ostream& out,
              std::ostream& err, std::atomic<bool>& interrupted) {
  Metrics metrics;
  // One place in the queue: a turn may arrive before the previous reply's slot is marked free.
  Scheduler scheduler(engine, metrics, {.max_queue = 1});
  openai::Service service(engine, scheduler, metrics, family);
  scheduler.start();
  if (o.prompts)
    err << fmt::format("{} ({} chat template, {} positions). Ctrl-C stops a reply; /clear forgets the conversation; "
                       "Ctrl-D or /exit quits.\n",
                       engine.info().id, chat_family_name(family), scheduler.n_ctx());

  std::vector<ChatMessage> history;
  if (!o.system.empty()) history.push_back({"system", o.system});
  const size_t kept = history.size();
  int turn = 0;
  for (std::string line;;) {
    if (o.prompts) out << ">>> " << std::flush;
    if (!std::getline(in, line)) break;
    interrupted = false;  // a Ctrl-C while typing stops nothing
    line = trimmed(line);
    if (line.empty()) continue;
    if (line == "/exit" || line == "/bye") break;
    if (line == "/clear") {
      history.resize(kept);
      err << "(the conversation is forgotten)\n";
      continue;
    }
    history.push_back({"user", line});
    openai::ApiRequest request;
    request.messages = history;
    request.sampling = o.sampling;
    request.seeded = true;
    request.default_max_tokens = o.max_tokens;
    openai::Started started;
    try {
      started = service.start(std::move(request));
    } catch (const openai::ApiError& e) {
      history.pop_back();
      err << "orchard chat: " << e.message()
          << (e.code() == "context_length_exceeded" ? " (/clear starts a new conversation)" : "") << "\n";
      continue;
    }
    const Reply reply = stream_reply(*started.job, started.tool_parser, out, o, interrupted);
    out << "\n" << std::flush;
    if (reply.reason == FinishReason::Error) {
      history.pop_back();
      err << "orchard chat: the reply failed: " << reply.error << "\n";
      continue;
    }
    if (reply.reason == FinishReason::Cancelled) err << "(stopped)\n";
    history.push_back({"assistant", reply.text});
    ++turn;
    if (o.verbose) {
      const double rate = reply.usage.generation_seconds > 0 ? reply.usage.completion_tokens / reply.usage.generation_seconds : 0;
      err << fmt::format("[turn {}: prompt {} tokens, reply {} tokens ({}), {:.1f} tok/s]\n", turn, reply.usage.prompt_tokens,
                         reply.usage.completion_tokens, finish_reason_name(reply.reason), rate);
    }
    err.flush();
  }
  if (o.prompts) out << "\n" << std::flush;
}

}  // namespace orchard::serve
