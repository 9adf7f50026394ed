// What the mains share about their command lines: --version, and how a usage error ends
// (exit 2 and "TOOL: error: ..." naming the real mistake).
#pragma once

#include <CLI/CLI.hpp>
#include <cctype>
#include <cstdio>
#include <optional>
#include <string>

#include "formats/build_info.h"
#include "formats/plan_file.h"

namespace piper::tools {

// The exit code of a usage error, as getopt-style tools use for misuse.
inline constexpr int kUsageError = 2;

inline std::string version_text(const std::string& tool) {
  return tool + " " + formats::piper_build_id() + ", plan format " +
         std::to_string(formats::kPlanFormatVersion);
}

// The first argument that looks like an option but names none of `app`'s.
inline std::optional<std::string> unknown_option(const CLI::App& app, int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string argument = argv[i];
    if (argument == "--") break;
    const bool option =
        argument.size() > 1 && argument[0] == '-' &&
        !(std::isdigit(static_cast<unsigned char>(argument[1])) || argument[1] == '.');
    if (!option) continue;
    const std::string name = argument.substr(0, argument.find('='));
    if (app.get_option_no_throw(name) == nullptr) return name;
  }
  return std::nullopt;
}

// Parses argv. Returns nullopt to go on, or the code to exit with: 0 after --help or
// --version (printed to stdout), kUsageError after a usage error (printed to stderr).
inline std::optional<int> parse_command_line(CLI::App& app, int argc, char** argv,
                                             const std::string& tool) {
  app.name(tool);
  app.set_version_flag("--version", version_text(tool),
                       "print Piper's version and commit and the plan format version, and exit");
  try {
    app.parse(argc, argv);
    return std::nullopt;
  } catch (const CLI::Success& done) {
    return app.exit(done);
  } catch (const CLI::ParseError& error) {
    std::string message = error.what();
    // CLI11 checks required arguments before unknown ones, which hides a mistyped flag.
    if (dynamic_cast<const CLI::RequiredError*>(&error) != nullptr && !app.get_allow_extras()) {
      if (const auto unknown = unknown_option(app, argc, argv)) {
        message = "unknown option '" + *unknown + "'";
      }
    }
    std::fprintf(stderr, "%s: error: %s (%s --help lists the options)\n", tool.c_str(),
                 message.c_str(), tool.c_str());
    return kUsageError;
  }
}

}  // namespace piper::tools
