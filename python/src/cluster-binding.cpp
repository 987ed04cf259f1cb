// squall._squall.LocalCluster: the C++ LocalCluster (tools/, what `squall
// start` and the end-to-end tests use) for Python: a server and governors
// as child processes on 127.0.0.1 with ephemeral ports and a temp work
// dir, which die with the Python process however it ends. The programs
// default to the ones squall._paths names (the build tree's, or the
// installed ones).
#include "binding.h"

#include <pybind11/stl.h>
#include <squall/tools/local-cluster.h>

#include <csignal>

namespace squall {
namespace python {

namespace {

std::string defaultProgram(const std::string& given, const char* name) {
  if (!given.empty()) return given;
  return py::module_::import("squall._paths").attr(name).cast<std::string>();
}

std::string stopCluster(LocalCluster& cluster) {
  py::gil_scoped_release release;
  return cluster.stop();
}

}  // namespace

void bindCluster(py::module_& m) {
  using Release = py::call_guard<py::gil_scoped_release>;
  py::class_<LocalCluster>(
      m, "LocalCluster",
      "A squall server and governors started as child processes on this machine (127.0.0.1, free ports, a "
      "temporary work dir), for tests, notebooks and trying things out. They die with this process however "
      "it ends. A context manager: leaving `with` stops them.")
      .def(py::init([](int governors, uint32_t cpus, bool python, std::vector<std::string> executors,
                       std::vector<std::string> governorArgs, std::vector<std::string> serverArgs,
                       const std::string& token, const std::string& logLevel, const std::string& http,
                       const std::string& workDir, const std::string& serverProgram, const std::string& governorProgram,
                       const std::string& pythonExecutor) {
             if (governors < 0) throw py::value_error("LocalCluster: governors must be >= 0");
             ClusterOptions options;
             options.governors = governors;
             options.cpus = cpus;
             for (auto& executor : executors) {
               try {
                 options.executors.push_back(resolveExecutor(executor));
               } catch (const std::invalid_argument& e) {
                 throw py::value_error(std::string("LocalCluster executors: ") + e.what());
               }
             }
             if (python) options.executors.push_back("python=" + defaultProgram(pythonExecutor, "PYTHON_EXECUTOR"));
             options.governorArgs = std::move(governorArgs);
             options.serverArgs = std::move(serverArgs);
             options.token = token;
             options.logLevel = logLevel;
             options.http = http;
             options.workDir = workDir;
             options.serverProgram = defaultProgram(serverProgram, "SERVER");
             options.governorProgram = defaultProgram(governorProgram, "GOVERNOR");
             auto cluster = std::make_unique<LocalCluster>(options);
             py::gil_scoped_release release;
             try {
               cluster->start();
             } catch (const std::exception& e) {
               cluster->stop();
               throw Error(std::string("LocalCluster: ") + e.what());
             }
             return cluster;
           }),
           py::kw_only(), py::arg("governors") = 1, py::arg("cpus") = 0, py::arg("python") = true,
           py::arg("executors") = std::vector<std::string>{}, py::arg("governor_args") = std::vector<std::string>{},
           py::arg("server_args") = std::vector<std::string>{}, py::arg("token") = "", py::arg("log_level") = "warn",
           py::arg("http") = "off", py::arg("work_dir") = "", py::arg("server_program") = "",
           py::arg("governor_program") = "", py::arg("python_executor") = "",
           "Starts a server and governors (each with cpus cpus; 0: detected) and returns once all are "
           "registered. python: the governors keep squall-python-executor warm for @squall.remote. executors: "
           "more tasklib executors, 'NAME=PROGRAM'. http: the status page's address ('127.0.0.1:0': a free "
           "port; 'off').")
      .def_property_readonly("address", &LocalCluster::serverAddress, "The server's host:port, for Client().")
      .def_property_readonly("http_address", &LocalCluster::httpAddress, "The status page's host:port ('' when off).")
      .def_property_readonly("work_dir", &LocalCluster::workDir)
      .def_property_readonly("governor_count", &LocalCluster::governorCount)
      .def_property_readonly("server_pid", [](LocalCluster& c) { return c.server().pid(); })
      .def(
          "governor_pid", [](LocalCluster& c, size_t i) { return c.governor(i).pid(); }, py::arg("index"))
      .def(
          "governor_running", [](LocalCluster& c, size_t i) { return c.governor(i).running(); }, py::arg("index"))
      .def(
          "kill_governor",
          [](LocalCluster& c, size_t i) {
            auto& governor = c.governor(i);
            governor.signal(SIGKILL);
            governor.waitExit(std::chrono::steady_clock::now() + std::chrono::seconds(30));
          },
          py::arg("index"), Release(), "Kills governor index with SIGKILL, as a crash would, and reaps it.")
      .def("add_governor", &LocalCluster::addGovernor, Release(), "Starts one more governor; returns its index.")
      .def("kill_server", &LocalCluster::killServer, Release(), "Kills the server with SIGKILL and reaps it.")
      .def("restart_server", &LocalCluster::restartServer, Release(),
           "Starts the server again on the same address and session log.")
      .def(
          "stop",
          [](LocalCluster& c) {
            auto problems = stopCluster(c);
            if (!problems.empty()) throw Error("LocalCluster: " + problems);
          },
          "Stops everything (governors first); raises squall.Error if a process did not stop cleanly.")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](LocalCluster& c, py::args) {
        auto problems = stopCluster(c);
        if (!problems.empty()) throw Error("LocalCluster: " + problems);
      });
}

}  // namespace python
}  // namespace squall
