int gcd(int a, int b) {
    while (b != 0) {
        int t = b;
        b = a % b;
        a = t;
    }
    return a;
}

int main() {
    int i;
    for (i = 1; i <= 12; i++) {
        if (gcd(i, 12) == 1) {
            printf("%d is coprime to 12\n", i);
        } else {
            printf("gcd(%d, 12) = %d\n", i, gcd(i, 12));
        }
    }
    return 0;
}
