// piper-export CHECKPOINT -o OUT [--model model.onnx] [--prefix-strip P] [--inference
// [--output NAME]]: writes a checkpoint's trained model as ONNX and as a PyTorch state dict
// (formats/model_export.h).
#include <CLI/CLI.hpp>
#include <exception>
#include <iostream>
#include <string>

#include "formats/error.h"
#include "formats/model_export.h"
#include "tools/command_line.h"

int main(int argc, char** argv) {
  CLI::App app{
      "Writes the model of a checkpoint (piper-run --checkpoint-dir) with its trained weights: "
      "OUT/model.onnx, and OUT/model.safetensors, a PyTorch state dict under the names "
      "state_dict() uses (float32; tied weights' aliases too, from the model's "
      "piper.tied_weights metadata), which model.load_state_dict takes. Every shard is "
      "checked against its checksum."};
  piper::formats::ExportOptions options;
  app.add_option("checkpoint", options.checkpoint,
                 "a step folder (DIR/step-000040), or a --checkpoint-dir folder: its latest "
                 "committed step")
      ->required();
  app.add_option("-o,--output-dir", options.out,
                 "the folder to write; new, empty, or one piper-export wrote")
      ->required()
      ->type_name("OUT");
  app.add_option("--model", options.model,
                 "the ONNX model the plan was made from (default: the one the checkpoint's "
                 "index.json records)")
      ->type_name("FILE");
  app.add_option("--prefix-strip", options.prefix_strip,
                 "take PREFIX off every state dict name (every name must start with it), e.g. "
                 "'model.' so that the model inside samples/hf's loss wrapper loads it")
      ->type_name("PREFIX");
  auto* inference = app.add_flag(
      "--inference", options.inference,
      "also write OUT/inference.onnx: the forward graph up to the loss's inputs (the logits, "
      "output 'logits'), trained weights, the loss and its labels removed");
  app.add_option("--output", options.output,
                 "with --inference: the value to cut the graph at, when the loss's inputs are "
                 "ambiguous")
      ->type_name("NAME")
      ->needs(inference);
  if (const auto exit_code = piper::tools::parse_command_line(app, argc, argv, "piper-export")) {
    return *exit_code;
  }
  try {
    const piper::formats::ExportReport report = piper::formats::export_checkpoint(options);
    std::cout << "exported step folder " << report.step_folder << " of model " << report.model_path
              << " (" << report.state_dict_names << " state dict names, " << report.aliases
              << " of them tied aliases):\n";
    for (const std::string& file : report.written) std::cout << "  " << file << "\n";
  } catch (const std::exception& error) {
    std::cerr << "piper-export: error: " << error.what() << "\n";
    return 1;
  }
  return 0;
}
