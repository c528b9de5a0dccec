// An MLP on dynamic shapes in the style of IREE's samples/models/mlp_linalg.mlir: every tensor is ?x?,
// sizes come from tensor.dim; linalg.fill zeroes the accumulator, linalg.matmul, then an elementwise
// linalg.generic (bias add + ReLU). Written by hand for the tests; only upstream dialects.
#map = affine_map<(d0, d1) -> (d0, d1)>
#bias = affine_map<(d0, d1) -> (d1)>
module {
  func.func @mlp(%lhs: tensor<?x?xf32>, %rhs: tensor<?x?xf32>, %bias: tensor<?xf32>) -> tensor<?x?xf32> {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %zero = arith.constant 0.000000e+00 : f32
    %m = tensor.dim %lhs, %c0 : tensor<?x?xf32>
    %n = tensor.dim %rhs, %c1 : tensor<?x?xf32>
    %empty = tensor.empty(%m, %n) : tensor<?x?xf32>
    %acc = linalg.fill ins(%zero : f32) outs(%empty : tensor<?x?xf32>) -> tensor<?x?xf32>
    %mm = linalg.matmul ins(%lhs, %rhs : tensor<?x?xf32>, tensor<?x?xf32>) outs(%acc : tensor<?x?xf32>) -> tensor<?x?xf32>
    %act = linalg.generic {indexing_maps = [#map, #bias, #map], iterator_types = ["parallel", "parallel"]}
        ins(%mm, %bias : tensor<?x?xf32>, tensor<?xf32>) outs(%empty : tensor<?x?xf32>) {
    ^bb0(%x: f32, %b: f32, %out: f32):
      %sum = arith.addf %x, %b : f32
      %relu = arith.maximumf %sum, %zero : f32
      linalg.yield %relu : f32
    } -> tensor<?x?xf32>
    return %act : tensor<?x?xf32>
  }
}
