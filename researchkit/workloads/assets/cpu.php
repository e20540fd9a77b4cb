<?php
// researchkit runtimes-web, CPU endpoint: each GET multiplies two N x N matrices (naive triple loop).
// ?seed=S (integer >= 0, default 0) changes the matrices; the reply carries a sum and an MD5 of the product.
$t0 = hrtime(true);
$n = __N__;
$seed = isset($_GET['seed']) ? max(0, intval($_GET['seed'])) % 1000000 : 0;
$a = [];
$b = [];
for ($i = 0; $i < $n; $i++) {
    for ($j = 0; $j < $n; $j++) {
        $a[$i][$j] = ($i * 31 + $j * 17 + $seed) % 97;
        $b[$i][$j] = ($i * 13 + $j * 29 + 2 * $seed) % 89;
    }
}
$c = [];
for ($i = 0; $i < $n; $i++) {
    for ($j = 0; $j < $n; $j++) {
        $s = 0;
        for ($k = 0; $k < $n; $k++) {
            $s += $a[$i][$k] * $b[$k][$j];
        }
        $c[$i][$j] = $s;
    }
}
$t1 = hrtime(true);
$rows = [];
$sum = 0;
foreach ($c as $row) {
    $rows[] = implode(',', $row);
    $sum += array_sum($row);
}
header('Content-Type: application/json');
header('Cache-Control: no-store');
echo json_encode(['endpoint' => 'cpu', 'n' => $n, 'seed' => $seed, 'sum' => $sum, 'md5' => md5(implode(';', $rows)),
                  'server_s' => ($t1 - $t0) / 1e9, 'pid' => getmypid()]), "\n";
