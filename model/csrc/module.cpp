// The Python module of the engine's C++ extension (model/cpu_ext.py builds it): the kernels of
// kernels.h and the fused decode step of fused_decode.cpp.

#include "kernels.h"

void bind_fused_decode(pybind11::module_& m);

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("bf16_matrix_available", &composer::bf16_matrix_available);
  m.def("parallel_width", &composer::parallel_width);
  m.def("pack_vnni", &composer::pack_vnni);
  m.def("linear_vnni", &composer::linear_vnni, py::call_guard<py::gil_scoped_release>());
  m.def("moe_vnni", &composer::moe_vnni, py::call_guard<py::gil_scoped_release>());
  m.def("linear_rowdot", &composer::linear_rowdot, py::call_guard<py::gil_scoped_release>());
  m.def("rotary_store", &composer::rotary_store, py::call_guard<py::gil_scoped_release>());
  m.def("quantize_kv", &composer::quantize_kv);
  m.def("rms_norm", &composer::rms_norm);
  m.def("attention", &composer::attention, py::call_guard<py::gil_scoped_release>());
  bind_fused_decode(m);
}
