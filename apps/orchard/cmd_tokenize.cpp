// `orchard tokenize -m MODEL "text"`: the token ids of a text, on one line.
#include <fmt/format.h>

#include <memory>
#include <string>

#include "apps/orchard/commands.h"
#include "model/gguf/reader.h"
#include "model/tokenizer/tokenizer.h"
#include "model/tokenizer/unicode.h"

namespace orchard::app {
namespace {

struct TokenizeOptions {
  std::string model;
  std::string text;
  bool no_bos = false;
  bool no_special = false;
  bool show_pieces = false;
};

// Control characters and bytes that are not UTF-8 (a token may hold part of a character)
// escaped, so every piece prints readably on one line.
std::string escape(std::string_view bytes) {
  std::string out;
  for (size_t pos = 0; pos < bytes.size();) {
    const model::unicode::Decoded d = model::unicode::decode_utf8(bytes, pos);
    const auto c = static_cast<unsigned char>(bytes[pos]);
    if (!d.valid) {
      out += fmt::format("\\x{:02x}", c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\\' || c == '\'') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7F) {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out.append(bytes.substr(pos, d.length));
    }
    pos += d.length;
  }
  return out;
}

void run_tokenize(const TokenizeOptions& options) {
  const model::gguf::Reader file = model::gguf::Reader::open(options.model);
  const model::Tokenizer tokenizer = model::Tokenizer::from_gguf(file);
  const bool add_bos = !options.no_bos && tokenizer.adds_bos();
  const std::vector<model::TokenId> ids = tokenizer.encode(options.text, add_bos, !options.no_special);
  if (options.show_pieces) {
    for (model::TokenId id : ids) {
      fmt::print("{:>7} '{}'\n", id, escape(tokenizer.token_kind(id) == model::TokenKind::Control ? tokenizer.token_text(id) : tokenizer.token_bytes(id)));
    }
    return;
  }
  fmt::print("{}\n", fmt::join(ids, " "));
}

}  // namespace

void add_tokenize_command(CLI::App& app) {
  auto options = std::make_shared<TokenizeOptions>();
  CLI::App* cmd = app.add_subcommand("tokenize", "Print the token ids of a text (works on vocab-only GGUF files)");
  cmd->add_option("-m,--model", options->model, "GGUF file")->required()->check(CLI::ExistingFile);
  cmd->add_option("text", options->text, "Text to tokenize")->required();
  cmd->add_flag("--no-bos", options->no_bos, "Leave out the BOS token even when the model adds one");
  cmd->add_flag("--no-special", options->no_special, "Tokenize special-token texts such as <|im_start|> as plain text");
  cmd->add_flag("--show-pieces", options->show_pieces, "Print one token per line: id and the text it stands for");
  cmd->callback([options] { run_tokenize(*options); });
}

}  // namespace orchard::app
