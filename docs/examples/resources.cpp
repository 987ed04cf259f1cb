// docs/resources.md: tasks asking for GPUs (a whole one, two halves of
// one) and an amount of a sum pool, told their items by their environment.
// Needs governors that offer gpus and scratch (the docs test starts them
// with --resource gpus=[0,1] --resource scratch=sum(10G)).
#include <squall/client/client.h>

#include <cstdio>

int main() {
  squall::Client client;
  auto session = client.newSession("resources");
  // guide:begin
  using squall::Program;
  auto train = session.execute(
      Program::shell("echo train: gpus=$SQUALL_RESOURCE_GPUS threads=$OMP_NUM_THREADS").stdoutOutput());
  train.cpus(2).resource("gpus", 1).resource("scratch", "2G");
  auto infer = session.execute(Program::shell("echo infer: gpus=$CUDA_VISIBLE_DEVICES")
                                   .input(train.output(), "model")   // runs once train has ended
                                   .stdoutOutput());
  infer.resource("gpus", 0.5);                     // half a GPU
  auto plain = session.execute(Program::shell("echo plain: gpus=[$CUDA_VISIBLE_DEVICES]").stdoutOutput());
  // guide:end
  for (auto* task : {&train, &infer, &plain}) task->output().keep();
  session.submit();
  for (auto* task : {&train, &infer, &plain}) std::printf("%s", task->output().fetch().c_str());
  return 0;
}
